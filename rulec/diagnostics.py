"""Diagnostics: the code registry, the Diagnostic value, and its text renderings (the SARIF log
is a command's output: `rulec.commands.sarif`, chosen by `rulec.commands.cli`)."""
from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from rulec.source import SourceFile, Span

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Code:
    """A stable diagnostic code: never renumbered, never reused."""

    code: str
    name: str
    severity: str
    summary: str
    doc: str


CODES: tuple[Code, ...] = (
    # ---- R0xx: reading the text
    Code("R001", "syntax-error", ERROR, "the text does not follow the grammar",
         "The parser met a token it did not expect. The message says what was expected at that "
         "point; when a `{` block is still open, a note says where it opened. Each top-level "
         "declaration with a syntax error is reported (at most 20 per file); the others are "
         "still checked."),
    Code("R002", "unknown-word", ERROR, "a misspelled keyword (event, action, phase, statement)",
         "A word stands where the grammar expects a keyword, and it is close to one of them: "
         "usually a typo such as `on pod faild`. The help names the closest keyword."),
    Code("R003", "invalid-escape", ERROR, "an unknown backslash escape in a string",
         "Strings know `\\\"`, `\\\\`, `\\n` and `\\t`. Any other backslash escape is an error "
         "rather than being kept or dropped silently."),
    Code("R004", "invalid-template", ERROR, "a `{` or `}` in a template that opens or closes nothing",
         "In a string, `{name}` is a placeholder and `{<<expr>>}` embeds JMESPath; write `{{` and "
         "`}}` for literal braces."),
    Code("R005", "nesting-too-deep", ERROR, "a condition, filter or expression nested more than "
         "100 levels deep",
         "The runtime evaluates conditions, filters and JMESPath expressions by recursion, so "
         "their nesting is bounded: at most 100 levels, counting the defines a filter uses as "
         "the filters they stand for (a chain of defines each using the one before nests as "
         "deep as it is long). The position is the first place past the limit."),
    # ---- R1xx: names and references
    Code("R101", "unknown-kind", ERROR, "a kind name that no `job` declares",
         "`inject ... into pods of NAME` must name kinds declared by `job NAME: ...` in one of the "
         "files given to the same command."),
    Code("R102", "unknown-define", ERROR, "`is NAME` with no `define NAME`",
         "A pod filter used as `is NAME` must be declared with `define NAME = ...` in one of the "
         "files given to the same command."),
    Code("R103", "unknown-phase", ERROR, "a phase outside Pending, Running, Suspended, Restarting, "
         "Succeeded, Failed",
         "Phases form a closed set. Status value maps and `job verdict changed to PHASE` must use "
         "one of them (any letter case)."),
    Code("R104", "unknown-placeholder", ERROR, "a `{name}` placeholder that does not exist here",
         "Templates know a fixed set of placeholders (see the language reference); injection "
         "templates know fewer, and `{argv}` exists only in `wrap ... with shell`."),
    Code("R105", "duplicate-name", ERROR, "two declarations with the same name",
         "Kinds, defines, injections, policy ids, sidecars and volumes of one injection must each "
         "have a unique name; the note points at the first declaration."),
    Code("R106", "duplicate-clause", ERROR, "a statement or clause given twice where one is allowed",
         "For example two `task` statements in a kind, two `reason` clauses on one action, or "
         "two `webhook timeout` settings: one would silently override the other."),
    Code("R107", "define-cycle", ERROR, "a `define` that uses itself",
         "Defines are inlined into the plan, so a define that reaches itself through `is` can never "
         "be expanded."),
    Code("R108", "missing-clause", ERROR, "a required statement is missing",
         "For example a `sidecar` without `image`: the pod would be rejected by the API server."),
    Code("R109", "unknown-cause", ERROR, "`cause \"name\"` with no `cause \"name\" when ...`",
         "A pod filter used as `cause \"name\"` must name a cause declared with `cause \"name\" "
         "when FILTER hint \"...\"` in one of the files given to the same command."),
    # ---- R2xx: JMESPath
    Code("R201", "jmespath-syntax", ERROR, "a JMESPath expression that does not parse",
         "The position points at the offending character inside `<<...>>`."),
    Code("R202", "double-quoted-string", ERROR, "`\"text\"` used as a string inside JMESPath",
         "In JMESPath, `\"Failed\"` is a quoted field name, not a string: `status.phase == \"Failed\"` "
         "compares against a field called Failed and is never true. Write `'Failed'`."),
    Code("R203", "non-boolean-condition", ERROR, "a condition that can only yield a string or number",
         "A condition is tested for JMESPath truthiness. An expression that can only produce a "
         "string or a number (a literal, `length(...)`, or a field that is a string such as "
         "`status.phase`) is true whenever it is non-empty, which is almost never what is meant: "
         "compare it (`status.phase == 'Failed'`)."),
    Code("R204", "not-precedence", WARNING, "`!` that negates less than the path after it",
         "In JMESPath `!` binds tighter than `.`, `[?...]`, `[]` and `.*`: "
         "`!metadata.deletionTimestamp` means `(!metadata).deletionTimestamp`, a field read "
         "from a boolean, which is always null. Write `!(metadata.deletionTimestamp)`, or "
         "compare: `metadata.deletionTimestamp == null`."),
    Code("R205", "unknown-function", ERROR, "a JMESPath function that does not exist",
         "Expressions may call JMESPath's own functions and the runtime's (`now`, `age`, "
         "`duration`, `quantity`, `regex_match`). Any other name fails when the expression is "
         "evaluated, which reads as null: the condition would never hold."),
    Code("R206", "wrong-argument-count", ERROR, "a JMESPath function called with too many or too "
         "few arguments",
         "Each function takes a fixed number of arguments (a few, such as `merge`, at least "
         "some number). A call with another number fails when evaluated, which reads as null."),
    # ---- R3xx: values
    Code("R301", "exit-code-range", ERROR, "an exit code outside the 32-bit signed range",
         "Container exit codes are 32-bit signed integers, as Kubernetes reports them: 0-255 on "
         "Linux (a signal N shows as 128+N), negative ones on Windows. A code outside "
         "-2147483648..2147483647, or an empty range, never matches."),
    Code("R302", "exit-zero-on-failure", WARNING, "exit 0 in a filter on a failure",
         "On a failure only containers that terminated with a non-zero exit code are read (as "
         "Kubernetes' podFailurePolicy reads them), so `exit 0` there never matches; the filter "
         "was probably meant for another event."),
    Code("R303", "invalid-key", ERROR, "a label or annotation key Kubernetes would reject",
         "Keys are an optional DNS subdomain prefix (at most 253 characters) and `/`, then a name of "
         "at most 63 characters of `[A-Za-z0-9_.-]`, starting and ending alphanumeric."),
    Code("R304", "invalid-label-value", ERROR, "a label value Kubernetes would reject",
         "Label values are empty or at most 63 characters of `[A-Za-z0-9_.-]`, starting and "
         "ending alphanumeric."),
    Code("R305", "invalid-dns-label", ERROR, "a container, sidecar or volume name Kubernetes would "
         "reject",
         "Container and volume names are DNS-1123 labels: at most 63 characters of lower-case "
         "letters, digits and `-`, starting and ending alphanumeric."),
    Code("R306", "value-out-of-range", ERROR, "a number or duration outside what it can mean",
         "For example `max 0` on a restart, a webhook timeout outside 1-30 seconds, `restarts < 0`, "
         "or a `doubling up to` cap shorter than the first delay."),
    Code("R307", "invalid-env-name", ERROR, "an environment variable name Kubernetes would reject",
         "The API server refuses a pod whose environment variable name is empty, holds `=` or a "
         "character that is not printable ASCII. An injection that writes one makes every pod "
         "it matches be refused, and `webhook failure open` does not help: the webhook did "
         "answer."),
    Code("R308", "empty-value", ERROR, "an empty mount path or sidecar image",
         "The API server refuses a pod with a volume mounted at `\"\"` or a container whose "
         "image is empty, so every pod the injection matches would be refused."),
    Code("R309", "unknown-condition-status", ERROR, "a pod condition status other than True, "
         "False or Unknown",
         "Pod conditions have the status \"True\", \"False\" or \"Unknown\" (with that spelling); "
         "`condition \"T\" = \"S\"` with any other status never matches."),
    Code("R310", "invalid-hint", ERROR, "a cause's hint that is empty, too long or not one line",
         "A hint goes into the job's condition message and the `jobrules.dev/verdict` "
         "annotation, where the job's owner reads it: one line of 1 to 200 characters, no "
         "control characters, no space at either end."),
    Code("R311", "invalid-cause-name", ERROR, "a cause name that cannot label a metric and a "
         "reason",
         "A cause name is a metric label value (`jobrules_failures_total{cause=...}`) and the "
         "end of a default reason (`Cause_oom`), which Kubernetes condition reasons restrict: "
         "a lower-case letter, then lower-case letters, digits and `_`, at most 63 characters."),
    # ---- R4xx: kinds, verdicts, policies
    Code("R401", "shadowed-policy", WARNING, "a policy that an earlier one always catches first",
         "Policies are tried in order and the first match wins. An earlier policy on the same "
         "event and task scope with no filter (and no longer duration) catches every case, so "
         "the later one never runs. Task-scoped policies are tried before job-wide ones."),
    Code("R402", "restart-without-budget", WARNING, "a restart with no `max`",
         "A restart without a budget can loop forever on a pod that always fails. Add `max N` "
         "(and usually `then fail job`)."),
    Code("R403", "no-terminal-verdict", WARNING, "a kind that can never be Succeeded or Failed",
         "No reachable verdict of the kind decides Succeeded or Failed, so its jobs never finish "
         "as far as jobrules is concerned."),
    Code("R404", "unreachable-verdict", WARNING, "a verdict after `otherwise`",
         "Verdicts are tried in order and `otherwise` always holds, so nothing after it is used."),
    Code("R405", "action-not-allowed", ERROR, "an action that makes no sense for its event",
         "`restart pod` needs a pod event; `restart task` and `fail task` need a pod or task "
         "event and a kind that declares `task`; job-wide events cannot restart a pod or a task."),
    Code("R406", "invalid-budget", ERROR, "a budget clause that cannot work",
         "`then ACTION`, `budget \"name\"` and `after D doubling` need `max N`; `count` needs "
         "`max N` and `then ACTION` (it only counts until the budget is spent); `per task` needs "
         "an event that has a task and a kind that declares `task`; `per pod` needs a pod event."),
    Code("R407", "invalid-filter", ERROR, "a filter that cannot apply where it stands",
         "Job-wide events (`job verdict changed`, `job running longer than`) have no pod to "
         "filter; `container \"name\"` must be joined with `and` at the top of a filter, once, "
         "beside the exit, reason or restarts terms it scopes; a kind's scope (`job ... where`) "
         "is an `and` of label tests and `namespace` lists, so that it is a Kubernetes label "
         "selector and a list of namespaces; `namespace label` tests stand at the top-level "
         "`and` of an injection's `where`, where they become the webhook's namespaceSelector."),
    Code("R408", "no-task-selector", ERROR, "a task used in a kind that declares no `task`",
         "`of task`, `task \"t\"` conditions and events, and task filters need the kind to say how "
         "a pod's task is found (`task label \"...\"` or `task <<expr>>`)."),
    Code("R409", "action-unsupported", ERROR, "a policy takes an action its kind cannot do",
         "How an action is done on a kind is said in its `actions { ... }` block (docs/language.md, "
         "Actions). `abort job` has no default: stopping a job's pods so that it can resume needs "
         "the operator's own switch (`set spec.suspend = true`); an action the kind says is "
         "`unsupported` cannot be taken by its policies, first or as a fallback."),
    Code("R410", "action-only-records", WARNING, "`fail job`, `complete job` or `terminate job` "
         "that only records the verdict",
         "A kind without a recipe for these actions in its `actions { ... }` block does them by "
         "`record`: the verdict is written (the job reads Failed or Succeeded) and nothing else "
         "happens, so its pods run on and its operator carries on. Say how the kind does it "
         "(`fail job -> condition \"FailureTarget\"` for batch Jobs, `set spec.suspend = true`, "
         "a Volcano `Command`), or write `fail job -> record` to say that recording is meant."),
    Code("R411", "task-failure-preempts-retries", WARNING, "a `task failed` policy that acts "
         "before a pod policy's retries",
         "A task fails with its first failed pod, so `on task \"t\" failed` takes that failure "
         "at once, while a pod policy of the same pods (`on pod failed -> restart pod max 3`) "
         "is still retrying: the job ends before any retry could help. To act once the retries "
         "are spent, give the pod policy a fallback (`restart pod max 3 then fail job`)."),
    Code("R412", "invalid-objects-step", ERROR, "a `set ... on` step that cannot work",
         "`set PATH = VALUE on API KIND label \"KEY\" = VALUE` merge-patches a field of the job's "
         "objects of another kind, found in its namespace by the label (Kueue's Workloads of a "
         "job: `on kueue.x-k8s.io/v1beta2 Workload label \"kueue.x-k8s.io/job-uid\" = "
         "<<metadata.uid>>`). It patches the objects themselves, never their `status` (another "
         "controller's to write), and it is not for the job's own kind: that would write every "
         "job the label finds; write the job's own field with `set PATH = VALUE`."),
    # ---- R5xx: injection
    Code("R501", "conflicting-injection", ERROR, "two injections write the same field differently",
         "Two injection operations that can apply to the same pod set the same annotation, label, "
         "or environment variable (on overlapping containers) to different values, or add two "
         "sidecars with one name: the result would depend on order. Injections overlap when they "
         "share a kind, unless their `where` filters provably exclude each other: an `and` of "
         "label, annotation, namespace or task tests on one key that no pod can pass at once."),
    Code("R502", "wrap-without-exec", WARNING, "a shell wrap that does not `exec` the command",
         "`wrap ... with shell` runs `/bin/sh -c`; without `exec` before `{argv}` the shell stays "
         "PID 1 and signals (SIGTERM on deletion) never reach the program."),
    Code("R503", "wrap-drops-command", WARNING, "a shell wrap without `{argv}`",
         "The shell template replaces the container's command and arguments; without `{argv}` the "
         "original program never runs."),
    Code("R504", "sidecar-shadows-container", ERROR, "a sidecar named like a primary container",
         "The mutator takes a container that already has the sidecar's name for the sidecar, "
         "already injected: with `primary container \"main\"` and `sidecar \"main\"`, the user's "
         "`main` is never given the sidecar and every operation on it finds nothing to change. "
         "Name the sidecar after what it does."),
    Code("R505", "wrap-loses-status", WARNING, "a shell wrap that pipes the command's output",
         "In `exec {argv} 2>&1 | tee FILE` the shell runs both sides of the pipeline in "
         "subshells and exits with the status of the last one (`tee`: 0), so the container "
         "always succeeds, and the program is no longer the process that receives SIGTERM. "
         "Redirect instead (`exec {argv} >>FILE 2>&1`), or keep the output on stdout too with a "
         "FIFO: `mkfifo /tmp/out; tee -a FILE </tmp/out & exec {argv} >/tmp/out 2>&1`."),
    # ---- R6xx: CRD schemas
    Code("R601", "unknown-field", ERROR, "a field path that the kind's CRD schema does not have",
         "With `--crd FILE`, status paths and the field paths read by JMESPath in a kind are looked "
         "up in the kind's OpenAPI schema."),
    Code("R602", "no-schema", WARNING, "`--crd` was given but no CRD defines the kind",
         "The kind's paths are not checked. Pass the CRD that defines its group, version and "
         "kind, or leave `--crd` out."),
    # ---- R9xx: about the rules themselves
    Code("R901", "unknown-allow", WARNING, "`# rulec: allow NAME` with an unknown code name",
         "The name after `allow` must be the kebab-case name of a warning, such as "
         "`restart-without-budget`."),
)

BY_CODE: dict[str, Code] = {c.code: c for c in CODES}
BY_NAME: dict[str, Code] = {c.name: c for c in CODES}

ENGINE = "engine"

# The reasons `rulec native` (rulec/native.py) gives for a policy of a batch/v1 Job that stays
# with the engine rather than going into the Job's own podFailurePolicy. They are no diagnostics
# (nothing is wrong with the rules), but stable codes all the same, so that `rulec explain`
# knows them: never renumbered, never reused. docs/native.md has the table.
NATIVE_CODES: tuple[Code, ...] = (
    Code("N101", "native-action", ENGINE, "an action the Job controller does not have",
         "The podFailurePolicy actions are FailJob, Ignore, Count and FailIndex: `fail job`, "
         "`ignore`, `count ... then fail job` (the Job's backoffLimit) and `fail task` (an "
         "index, with backoffLimitPerIndex). `restart pod`, `restart task`, `restart job`, "
         "`abort job`, `terminate job` and `complete job`, and a `count` whose fallback is not "
         "`fail job` (per job) or `fail task` (per task), stay with the engine."),
    Code("N102", "native-event", ENGINE, "an event other than `pod failed or evicted`",
         "A podFailurePolicy decides pod failures only. Policies on other events stay with the "
         "engine; those that take a pod's end before `pod failed` does (`pod evicted`, `pod "
         "deleted`) also keep every later failure policy with the engine (N107), as they are "
         "tried first. The others (pending, running, restarts, tasks, the job) do not compete "
         "with pod failures and end nothing."),
    Code("N103", "native-filter", ENGINE, "a filter the Job controller cannot express",
         "A rule of a podFailurePolicy has exit codes (`exit in [...]`, `exit not in [...]`, "
         "optionally `container \"c\" and ...`) or pod conditions (`condition \"T\"`, "
         "`condition \"T\" = \"False\"`, several joined with `or`). No filter at all, a task "
         "scope, a condition's `reason`, `not`, labels, pod or container reasons, restarts "
         "and JMESPath stay with the engine."),
    Code("N104", "native-both", ENGINE, "exit codes and pod conditions in one filter",
         "A podFailurePolicy rule has `onExitCodes` or `onPodConditions`, never both; a filter "
         "that needs both stays with the engine."),
    Code("N105", "native-too-many-codes", ENGINE, "more than 255 exit codes",
         "A rule's `onExitCodes` holds 1 to 255 values; ranges count as every code in them."),
    Code("N106", "native-exit-zero", ENGINE, "exit 0 among `exit in [...]`",
         "The API server rejects `operator: In` with the value 0 (a container that exited 0 "
         "did not fail; on a failure the rules never match it either: R302). Drop the 0."),
    Code("N107", "native-after-engine", ENGINE, "after a policy that stays with the engine",
         "The first matching policy wins, and policies are never reordered: once a failure "
         "policy stays with the engine, every later one does too, since the Job controller "
         "would decide a failure before the engine's policy had its turn."),
    Code("N108", "native-too-many-rules", ENGINE, "more than 20 podFailurePolicy rules",
         "A podFailurePolicy holds at most 20 rules; the policy that would make the 21st stays "
         "with the engine, and every later one (N107)."),
    Code("N109", "native-text", ENGINE, "a reason or message the Job controller does not write",
         "The Job controller fails a Job with the reason `PodFailurePolicy` and its own message "
         "(`Container C for pod NS/P failed with exit code X matching FailJob rule at index I`, "
         "or `Pod NS/P has condition T matching FailJob rule at index I`), and at its backoff "
         "limit with `BackoffLimitExceeded`. A `fail job` goes native with no reason or with "
         "those; another text stays with the engine."),
    Code("N110", "native-failed-only", ENGINE, "`pod failed` without `or evicted`",
         "The Job controller gives an evicted or disrupted pod that failed to its "
         "podFailurePolicy like any failed pod; `on pod failed` leaves those pods out. Write "
         "`on pod failed or evicted` to say what the Job controller does."),
    Code("N111", "native-budget", ENGINE, "a budget the Job cannot keep",
         "A Job has one budget: `backoffLimit` (or `backoffLimitPerIndex`, one per index). A "
         "`count` goes native when its budget is `max N` or `max <<spec.backoffLimit>>` (per "
         "task: `<<spec.backoffLimitPerIndex>>`), shared by every native `count` (one `budget` "
         "name, one `max`); a second budget, `per pod`, a delay, or a fallback with a budget "
         "of its own stays with the engine."),
    Code("N112", "native-task", ENGINE, "a task that is not the Job's completion index",
         "FailIndex and backoffLimitPerIndex are about the index of an Indexed Job: `fail task` "
         "and `per task` go native when the kind's task is `task label "
         "\"batch.kubernetes.io/job-completion-index\"`."),
    Code("N113", "native-containers", ENGINE, "exit codes read from some containers only",
         "The Job controller reads the exit codes of every container; the rules read only the "
         "kind's primary containers (`primary container ...`) and never those an injection "
         "adds. With either, exit-code policies of the kind stay with the engine."),
    Code("N114", "native-audit", ENGINE, "a policy in audit",
         "An audited policy only watches; the Job controller would act. It stays with the "
         "engine until `audit` is dropped."),
    Code("N115", "native-count", ENGINE, "a count the Job's one budget would not keep alike",
         "The Job's backoffLimit also counts every failure no rule takes, where the rules count "
         "only what their `count` policies match. A `count` goes native only when every "
         "failure policy does and the last one is the unfiltered `count` on the same budget "
         "(the Job's default handling)."),
    Code("N116", "native-index-mix", ENGINE, "a per-job budget beside per-index handling",
         "With backoffLimitPerIndex (which `fail task` needs) the Job controller counts "
         "failures per index: a `count` per job after a `fail task` or a `count ... per task`, "
         "or the other way round, stays with the engine."),
    # ---- injections as MutatingAdmissionPolicies (rulec/native_admission.py): these stay
    # with the webhook
    Code("N117", "native-jmespath", ENGINE, "an injection reads what CEL is not given",
         "A MutatingAdmissionPolicy sees the pod and its owner reference, not the owner object "
         "nor the project's JMESPath functions. A `where <<...>>` filter, a value `<<...>>` "
         "other than owner.apiVersion, owner.kind, owner.metadata.name, owner.metadata.uid or "
         "namespace, a kind whose task is an expression, or a `primary pods` filter on more "
         "than labels keeps the injection with the webhook."),
    Code("N118", "native-wrap", ENGINE, "an injection wraps a command",
         "`wrap` needs the container's command; where it is only in the image the webhook "
         "refuses the pod, naming the container, which a policy cannot do. Injections with "
         "`wrap` stay with the webhook."),
    Code("N119", "native-empty", ENGINE, "an injection that changes nothing",
         "An injection with no op (or no kind) has nothing to compile: it stays with the "
         "webhook, which does nothing for it either."),
    # ---- policies of kinds other than batch/v1 Job
    Code("N120", "native-kind", ENGINE, "a policy of a kind with no native failure policy",
         "rulec compiles failure handling only to the batch/v1 Job's own podFailurePolicy and "
         "backoff limits, which the Job controller runs. The policies of every other kind "
         "(the training operator's jobs, JobSet, Argo, Tekton, Volcano, ...) stay with the "
         "engine; their own failure settings (JobSet's failurePolicy, Argo's retryStrategy, "
         "Volcano's policies) are not compiled to (planned)."),
)
NATIVE_BY_CODE: dict[str, Code] = {c.code: c for c in NATIVE_CODES}
NATIVE_BY_NAME: dict[str, Code] = {c.name: c for c in NATIVE_CODES}


@dataclass(frozen=True, slots=True)
class Note:
    message: str
    span: Span | None = None


@dataclass(frozen=True, slots=True)
class Diagnostic:
    code: str
    severity: str
    message: str
    span: Span
    help: str | None = None
    notes: tuple[Note, ...] = ()

    @property
    def name(self) -> str:
        return BY_CODE[self.code].name

    def sort_key(self) -> tuple[str, int, int, str, str]:
        return (self.span.path, self.span.line, self.span.column, self.code, self.message)


def make(name: str, span: Span, message: str, help: str | None = None,
         notes: Iterable[Note] = ()) -> Diagnostic:
    """A diagnostic for the code called `name`, with the registry's severity. Messages quote
    the user's text, which may hold a line break or a control character: shown escaped, so a
    diagnostic stays one line (editors and CI read them line by line)."""
    code = BY_NAME[name]
    return Diagnostic(code.code, code.severity, one_line(message), span,
                      None if help is None else one_line(help),
                      tuple(Note(one_line(n.message), n.span) for n in notes))


def one_line(text: str) -> str:
    """`text` with its line breaks, tabs and other control characters escaped (`\\n`, `\\t`,
    `\\x1b`)."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else
                   {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(ch, f"\\x{ord(ch):02x}"
                                                        if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
                   for ch in text)


def lookup(word: str) -> Code | None:
    """A code by number (`R001`, `N101`, any case) or kebab-case name: a diagnostic's or a
    reason of `rulec native`."""
    return (BY_CODE.get(word.upper()) or BY_NAME.get(word.lower())
            or NATIVE_BY_CODE.get(word.upper()) or NATIVE_BY_NAME.get(word.lower()))


def did_you_mean(word: str, candidates: Iterable[str]) -> str | None:
    """`did you mean `x`?` for the closest candidate, if any is close."""
    import difflib

    match = difflib.get_close_matches(word, sorted(set(candidates)), n=1, cutoff=0.6)
    return f"did you mean `{match[0]}`?" if match else None


_CONTROL_NAMES = {0x00: "null", 0x09: "tab", 0x0A: "line feed", 0x0D: "carriage return",
                  0x1B: "escape", 0x7F: "delete"}


def show_char(ch: str) -> str:
    """A character as a message shows it: `x` when it can be seen, else its code point and
    name (`U+00A0 (no-break space)`): printed raw, an invisible or control character would
    say nothing, or garble the terminal."""
    if ch.isprintable() and ch != " ":
        return f"`{ch}`"
    if ch == "\ufeff":
        return "U+FEFF (byte order mark)"
    name = unicodedata.name(ch, "").lower() or _CONTROL_NAMES.get(ord(ch), "control character")
    return f"U+{ord(ch):04X} ({name})"


# ---------------------------------------------------------------- renderers

FORMATS = ("concise", "full", "json", "github")


def render(diagnostics: Sequence[Diagnostic], fmt: str,
           sources: Mapping[str, SourceFile]) -> str:
    """All diagnostics, in order, in one of FORMATS."""
    ordered = sorted(diagnostics, key=Diagnostic.sort_key)
    if fmt == "json":
        return json.dumps([_json(d) for d in ordered], indent=2, ensure_ascii=False) + "\n"
    if fmt == "github":
        return "".join(_github(d) + "\n" for d in ordered)
    if fmt == "full":
        return "".join(_full(d, sources.get(d.span.path)) + "\n" for d in ordered)
    if fmt == "concise":
        return "".join(_concise(d) + "\n" for d in ordered)
    raise ValueError(f"no diagnostics format {fmt!r}: the formats are {', '.join(FORMATS)}")


def summary(diagnostics: Sequence[Diagnostic]) -> str:
    errors = sum(d.severity == ERROR for d in diagnostics)
    warnings = len(diagnostics) - errors
    return f"{_plural(errors, 'error')}, {_plural(warnings, 'warning')}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _concise(d: Diagnostic) -> str:
    """One line per diagnostic, a suggestion at its end; then a line per note, at the note's
    own position (so that editors jump to both), in the style of compilers' `note:` lines."""
    suggestion = f" ({d.help})" if d.help and d.help.startswith("did you mean") else ""
    lines = [f"{d.span}: {d.severity}[{d.code}] {d.message}{suggestion}"]
    lines += [f"{n.span or d.span}: note: {n.message}" for n in d.notes]
    return "\n".join(lines)


def _full(d: Diagnostic, source: SourceFile | None) -> str:
    s = d.span
    lines = [f"{d.severity}[{d.code}]: {d.message}", f"  --> {s}"]
    text = source.line_text(s.line) if source else ""
    gutter = " " * len(str(s.line))
    if source is not None and 1 <= s.line <= source.line_count:
        shown = _visible(text.expandtabs(4))
        start = len(text[: s.column - 1].expandtabs(4))
        end_col = s.end_column if s.end_line == s.line else len(text) + 1
        end = len(text[: max(end_col, s.column + 1) - 1].expandtabs(4))
        width = max(1, end - start)
        lines += [f"{gutter} |", f"{s.line} | {shown}".rstrip(),
                  f"{gutter} | {' ' * start}{'^' * width}"]
    if d.help:
        lines.append(f"{gutter} = help: {d.help}")
    for note in d.notes:
        where = f" ({note.span})" if note.span else ""
        lines.append(f"{gutter} = note: {note.message}{where}")
    return "\n".join(lines) + "\n"


def _visible(line: str) -> str:
    """A source line with its control characters as their pictures (U+2400...), one column
    each, so that the carets below still line up."""
    return "".join(chr(0x2400 + ord(c)) if ord(c) < 0x20 else "\u2421" if c == "\x7f" else c
                   for c in line)


def _json(d: Diagnostic) -> dict[str, object]:
    return {
        "code": d.code, "name": d.name, "severity": d.severity, "message": d.message,
        **d.span.to_json(), "help": d.help,
        "notes": [{"message": n.message, "span": n.span.to_json() if n.span else None}
                  for n in d.notes],
    }


def _github(d: Diagnostic) -> str:
    s = d.span
    props = (f"file={_gh_prop(s.path)},line={s.line},col={s.column},endLine={s.end_line},"
             f"endColumn={s.end_column},title={_gh_prop(f'{d.code} {d.name}')}")
    message = d.message + (f" (help: {d.help})" if d.help else "")
    return f"::{d.severity} {props}::{_gh_data(message)}"


def _gh_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")
