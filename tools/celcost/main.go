// Command celcost tells what the API server's CEL spends on a MutatingAdmissionPolicy: it
// compiles the policy as kube-apiserver does (k8s.io/apiserver's composited compiler over the
// base environment, untyped: a MutatingAdmissionPolicy is not type-checked, so the API server
// has no static estimate of its cost) and evaluates its variables, match conditions and
// mutations on a pod with the API server's own evaluators, which count the runtime cost
// against its budgets (celconfig.PerCallLimit per expression, RuntimeCELCostBudget per
// evaluation). One JSON object a line in ({"policy": MAP, "pod": Pod, "namespace": "ns"}),
// one out: {"policy", "matched", "conditions": [cost per condition], "mutations": [cost per
// mutation], "total", "error"}. A variable's cost counts where it is first used.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

type input struct {
	Policy    admissionregistrationv1.MutatingAdmissionPolicy `json:"policy"`
	Pod       corev1.Pod                                      `json:"pod"`
	Namespace string                                          `json:"namespace"`
}

type output struct {
	Policy     string  `json:"policy"`
	Matched    bool    `json:"matched"`
	Conditions []int64 `json:"conditions"`
	Mutations  []int64 `json:"mutations"`
	Total      int64   `json:"total"`
	Error      string  `json:"error,omitempty"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var case_ input
		if err := json.Unmarshal(in.Bytes(), &case_); err != nil {
			fmt.Fprintln(os.Stderr, "celcost:", err)
			os.Exit(2)
		}
		if err := out.Encode(evaluate(case_)); err != nil {
			fmt.Fprintln(os.Stderr, "celcost:", err)
			os.Exit(2)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "celcost:", err)
		os.Exit(2)
	}
}

// evaluate runs one policy on one pod as kube-apiserver 1.36's mutating policy plugin compiles
// and calls it (compilePolicy and dispatchInvocations), counting the cost each step spends.
func evaluate(c input) output {
	policy := &c.Policy
	result := output{Policy: policy.Name}
	fail := func(err error) output { result.Error = err.Error(); return result }
	opts := plugincel.OptionalVariableDeclarations{HasParams: policy.Spec.ParamKind != nil, HasAuthorizer: true}
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return fail(err)
	}
	variables := make([]plugincel.NamedExpressionAccessor, len(policy.Spec.Variables))
	for i, v := range policy.Spec.Variables {
		variables[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	compiler.CompileAndStoreVariables(variables, opts, environment.StoredExpressions)
	conditions := make([]plugincel.ExpressionAccessor, len(policy.Spec.MatchConditions))
	for i := range policy.Spec.MatchConditions {
		conditions[i] = (*matchconditions.MatchCondition)(&policy.Spec.MatchConditions[i])
	}
	patchOpts := opts
	patchOpts.HasPatchTypes = true

	gvk := schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	pod := c.Pod.DeepCopy()
	attrs := admission.NewAttributesRecord(pod, nil, gvk, c.Namespace, pod.Name, gvr, "",
		admission.Create, &metav1.CreateOptions{}, false, nil)
	versioned := &admission.VersionedAttributes{Attributes: attrs, VersionedKind: gvk, VersionedObject: pod}
	request := plugincel.CreateAdmissionRequest(attrs, metav1.GroupVersionResource(gvr), metav1.GroupVersionKind(gvk))
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.Namespace}}
	ctx := compiler.CreateContext(context.Background())
	budget := int64(celconfig.RuntimeCELCostBudget)
	result.Matched = true
	// Each condition alone, in order, as the matcher stops at the first false one.
	for _, condition := range conditions {
		evaluator := compiler.CompileCondition([]plugincel.ExpressionAccessor{condition}, opts, environment.StoredExpressions)
		evaluations, remaining, err := evaluator.ForInput(ctx, versioned, request, plugincel.OptionalVariableBindings{}, namespace, budget)
		if err != nil {
			return fail(err)
		}
		result.Conditions = append(result.Conditions, budget-remaining)
		result.Total += budget - remaining
		budget = remaining
		if evaluations[0].Error != nil {
			return fail(evaluations[0].Error)
		}
		if matched, ok := evaluations[0].EvalResult.Value().(bool); !ok || !matched {
			result.Matched = false
			return result
		}
	}
	for _, mutation := range policy.Spec.Mutations {
		var accessor plugincel.ExpressionAccessor
		switch mutation.PatchType {
		case admissionregistrationv1.PatchTypeJSONPatch:
			accessor = &patch.JSONPatchCondition{Expression: mutation.JSONPatch.Expression}
		default:
			accessor = &patch.ApplyConfigurationCondition{Expression: mutation.ApplyConfiguration.Expression}
		}
		evaluator := compiler.CompileMutatingEvaluator(accessor, patchOpts, environment.StoredExpressions)
		evaluation, remaining, err := evaluator.ForInput(ctx, versioned, request, plugincel.OptionalVariableBindings{}, namespace, budget)
		if err != nil {
			return fail(err)
		}
		if evaluation.Error != nil {
			return fail(evaluation.Error)
		}
		result.Mutations = append(result.Mutations, budget-remaining)
		result.Total += budget - remaining
		budget = remaining
	}
	return result
}
