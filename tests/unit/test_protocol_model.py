"""The protocol's Promela model (protocol/queue.pml, docs/explanation/protocol-model.md),
checked by Spin within bounds small enough for ``make test``; ``make model-check`` runs the
deeper configurations. The mutations are plausible mistakes in the code: the checker must find
a counterexample for each, or the model proves nothing."""

from __future__ import annotations

import pytest

from protocol import check

pytestmark = pytest.mark.skipif(check.available() is not None, reason=str(check.available()))


@pytest.mark.parametrize("config", check.BOUNDED, ids=lambda config: config.name)
def test_the_model_holds_its_properties(config: check.Config) -> None:
    result = check.run(config, timeout=120)
    assert result.errors == 0, result.output
    assert result.complete, f"the search did not cover the state space:\n{result.output}"
    assert result.states > 1000, result.output  # the model ran, not an empty shell


#: Each mutation and the property its counterexample must break (the assertion Spin reports).
CAUGHT_BY = {
    "MUT_OUTCOME_UNFENCED": "assertion violated (row[r].owner==w)",  # a late outcome written
    "MUT_RESCUE_KEEPS_TOKEN": "assertion violated (row[r].owner==w)",  # a late outcome written
    "MUT_RENEW_UNFENCED": "assertion violated !(two_live_claims)",  # two live claims of one row
}


@pytest.mark.parametrize("mutation", sorted(check.MUTATIONS))
def test_each_mutation_gets_a_counterexample(mutation: str) -> None:
    result = check.run(check.mutant(check.BOUNDED[1], mutation), timeout=120)
    assert result.errors > 0, f"{mutation} ({check.MUTATIONS[mutation]}) was not caught:\n{result.output}"
    assert result.violated == CAUGHT_BY[mutation], result.output
