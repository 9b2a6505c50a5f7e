"""Pod injection at admission: the plan's injections that apply to a pod, as one RFC 6902 patch.

Pure: no I/O and no API call (the clock is read only if an expression calls `now()` or `age()`,
since admission has no other notion of time). The owner comes from the pod's own
ownerReferences, and the patch is computed against exactly the pod received, because that is the
object the API server applies it to. A one-way stack, each layer importing only those below:

- `view`: the received pod, read defensively and as the evaluator reads it (task, filters);
- `draft`: the edits the matched injections want, checked against the pod, emitted as ops;
- `steps`: each injection compiled once per plan into steps over a draft;
- `inject`: `prepare(plan)`, and `mutate`, which runs the matching injections.

Every decision (conflicts, idempotence, malformed pods) is written down in docs/injection.md.
"""

from runtime.mutator.draft import RECORD_ANNOTATION
from runtime.mutator.inject import Injector, Mutation, mutate, prepare, serving
from runtime.mutator.steps import COMPLETION_ANNOTATION, COMPLETION_ENV
from runtime.mutator.view import MutationError, PodView

__all__ = ["COMPLETION_ANNOTATION", "COMPLETION_ENV", "RECORD_ANNOTATION", "Injector",
           "Mutation", "MutationError", "PodView", "mutate", "prepare", "serving"]
