package job

// The jobrules oracle: the Job controller's own decision functions, asked about cases that
// jobrules decides too (tests/unit/test_oracle.py compares the answers).
//
// tools/oracle/build.sh copies the controller package's non-test files from the Go module
// cache into a temporary module beside this file (nothing of theirs is kept in the
// repository) and builds the package's test binary; this file is the only test file of that
// package besides the table the extractor writes (extract/main.go). Run as
//
//	oracle.test -jobrules.oracle=pod-failure-policy  < cases.jsonl > answers.jsonl
//	oracle.test -jobrules.oracle=success-policy      < cases.jsonl > answers.jsonl
//	oracle.test -jobrules.oracle=table               > table.json
//
// Pod failure policy: each input line is {"podFailurePolicy": {...}, "pods": [pod, ...],
// "podIndexes": [i, ...]}: the policy, the pods (a line without them keeps those of the line
// before, so that many policies can share one set of pods) and which of them to decide (all
// when absent). The output line holds, per pod decided, matchPodFailurePolicy's answer:
// "action" (null when no rule matches), "index" (the first rule whose prefix of the policy
// decides; -1 for none), "message" (the Job failure message of a FailJob rule, else null) and
// "counts" (whether the failure counts against the backoff limits).
//
// Success policy: each input line is {"successPolicy": {...}, "completions": N, "cases":
// [[succeeded index, ...], ...]}; the output line holds, per case, matchSuccessPolicy's answer:
// "matched", "message" and "index" (the rule that matched, read back by asking again with the
// policy cut after each rule; -1 for none).
//
// Table: the table TestSyncJobWithJobPodFailurePolicy runs, as JSON: case name -> fields.

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"testing"

	batch "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

var jobrulesMode = flag.String("jobrules.oracle", "", "pod-failure-policy, success-policy or table")

func TestMain(m *testing.M) {
	flag.Parse()
	switch *jobrulesMode {
	case "":
		os.Exit(m.Run())
	case "table":
		// The table's code wants a *testing.T: run it as the one test there is.
		os.Exit(m.Run())
	}
	if err := jobrulesServe(*jobrulesMode, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "oracle:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func TestJobrulesTable(t *testing.T) {
	if *jobrulesMode != "table" {
		t.Skip("run with -jobrules.oracle=table")
	}
	out, err := json.Marshal(jobrulesPodFailurePolicyTable(t))
	if err != nil {
		t.Fatal(err)
	}
	// The test binary prints its own lines after ours: mark where the table starts and ends.
	fmt.Printf("\njobrules-table-begin\n%s\njobrules-table-end\n", out)
}

type jobrulesPodFailureCase struct {
	PodFailurePolicy *batch.PodFailurePolicy `json:"podFailurePolicy"`
	Pods             []v1.Pod                `json:"pods"`
	PodIndexes       []int                   `json:"podIndexes"`
}

type jobrulesPodFailureAnswer struct {
	Action  *batch.PodFailurePolicyAction `json:"action"`
	Index   int                           `json:"index"`
	Message *string                       `json:"message"`
	Counts  bool                          `json:"counts"`
}

type jobrulesSuccessCase struct {
	SuccessPolicy *batch.SuccessPolicy `json:"successPolicy"`
	Completions   int32                `json:"completions"`
	Cases         [][]int              `json:"cases"`
}

type jobrulesSuccessAnswer struct {
	Matched bool   `json:"matched"`
	Message string `json:"message"`
	Index   int    `json:"index"`
}

func jobrulesServe(mode string, in io.Reader, out io.Writer) error {
	lines := bufio.NewScanner(in)
	lines.Buffer(make([]byte, 1<<20), 1<<30)
	w := bufio.NewWriter(out)
	defer w.Flush()
	enc := json.NewEncoder(w)
	logger := klog.Background()
	var pods []v1.Pod
	for n := 1; lines.Scan(); n++ {
		var answer any
		switch mode {
		case "pod-failure-policy":
			var c jobrulesPodFailureCase
			if err := json.Unmarshal(lines.Bytes(), &c); err != nil {
				return fmt.Errorf("line %d: %w", n, err)
			}
			if c.Pods != nil {
				pods = c.Pods
			}
			chosen := c.PodIndexes
			if chosen == nil {
				for i := range pods {
					chosen = append(chosen, i)
				}
			}
			answers := make([]jobrulesPodFailureAnswer, 0, len(chosen))
			for _, i := range chosen {
				if i < 0 || i >= len(pods) {
					return fmt.Errorf("line %d: no pod %d", n, i)
				}
				answers = append(answers, jobrulesPodFailure(c.PodFailurePolicy, &pods[i]))
			}
			answer = map[string]any{"answers": answers}
		case "success-policy":
			var c jobrulesSuccessCase
			if err := json.Unmarshal(lines.Bytes(), &c); err != nil {
				return fmt.Errorf("line %d: %w", n, err)
			}
			answers := make([]jobrulesSuccessAnswer, 0, len(c.Cases))
			for _, indexes := range c.Cases {
				answers = append(answers, jobrulesSuccess(logger, c.SuccessPolicy, c.Completions, indexes))
			}
			answer = map[string]any{"answers": answers}
		default:
			return fmt.Errorf("unknown mode %q", mode)
		}
		if err := enc.Encode(answer); err != nil {
			return err
		}
	}
	return lines.Err()
}

func jobrulesPodFailure(policy *batch.PodFailurePolicy, pod *v1.Pod) jobrulesPodFailureAnswer {
	message, counts, action := matchPodFailurePolicy(policy, pod)
	index := -1
	if action != nil && policy != nil {
		for k := range policy.Rules {
			cut := &batch.PodFailurePolicy{Rules: policy.Rules[:k+1]}
			if _, _, a := matchPodFailurePolicy(cut, pod); a != nil {
				index = k
				break
			}
		}
	}
	return jobrulesPodFailureAnswer{Action: action, Index: index, Message: message, Counts: counts}
}

func jobrulesSuccess(logger klog.Logger, policy *batch.SuccessPolicy, completions int32, indexes []int) jobrulesSuccessAnswer {
	sorted := slices.Clone(indexes)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	succeeded := orderedIntervals{}.withOrderedIndexes(sorted)
	message, matched := matchSuccessPolicy(logger, policy, completions, succeeded)
	index := -1
	if matched && policy != nil {
		for k := range policy.Rules {
			cut := &batch.SuccessPolicy{Rules: policy.Rules[:k+1]}
			if _, ok := matchSuccessPolicy(logger, cut, completions, succeeded); ok {
				index = k
				break
			}
		}
	}
	return jobrulesSuccessAnswer{Matched: matched, Message: message, Index: index}
}
