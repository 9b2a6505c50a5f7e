"""The evaluator's parts, one topic each, run in order by `runtime.evaluator.evaluate`: what
occurred since the stored state (`occurrences`), which policy takes each occurrence
(`policies`), what is done about it (`decisions`, with `budgets`), which verdict holds
(`verdicts`), over an evaluation's inputs and what it accumulates (`ledger`); the values it
answers with are `outcomes`."""
