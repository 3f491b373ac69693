import json
import pytest
from tests.scenarios.test_scenarios import SCENARIOS, run

pytestmark = [pytest.mark.integration, pytest.mark.scenario]
P = next(p for p in SCENARIOS if p.stem == "v170-test4-quota-6000")


@pytest.mark.parametrize("i", range(8))
async def test_repeat(i: int, request: pytest.FixtureRequest, tmp_path) -> None:
    result = await run(P, "ours", request, tmp_path)
    held = [l["line"] for l in result["evidence"]["log"] if "release held" in l["line"]]
    refused = [(m["vm"], m["refusals"]) for m in result["migrations"] if m["refusals"]]
    print("REPEAT", i, json.dumps({"held": held, "refused": refused}))
    assert not refused
