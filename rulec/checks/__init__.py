"""The checker's topics, each a module of functions over one shared `Context`:

- `names`: declarations unique, defines without cycles, nesting within what can be evaluated;
- `kinds`: a kind's header, pods, verdicts and status (and its policies and schema paths);
- `filters`: verdict conditions and pod filters;
- `policies`: events, actions, budgets, recipes, policy ids and shadowed policies;
- `injections`: injection ops, shells, sidecars and the webhook's settings;
- `conflicts`: injections that set one field differently, with the solver that proves two
  injections' filters disjoint;
- `schema_paths`: field paths and JMESPath reads against the CRD schemas `--crd` gave;
- `values`: keys, label values, names, placeholders and phases, the leaves every topic checks.

`rulec.checker.check` runs them in order; each imports only the ones below it (`values` and
`schema_paths` at the bottom, then `filters`, `policies`, `kinds`), never the checker.
"""
