"""A step's rules, the reason a task fails when its attempts are spent, and what an error records."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.attempts import (
    DETAIL_LIMIT,
    REDACTED,
    StepRules,
    describe_error,
    never_retried_reason,
    rules_for,
    spent_reason,
)
from domain.retry_policy import RetryPolicy
from domain.skill import Complete, Skill, StepContext, StepOutcome, step

SERVICE = RetryPolicy(max_attempts=5, first_delay_s=1, max_delay_s=60)
SKILLS = RetryPolicy(max_attempts=3, first_delay_s=1, max_delay_s=60)
STEPS = RetryPolicy(max_attempts=1, first_delay_s=1, max_delay_s=1)
HOUR = timedelta(hours=1)


async def fetch_grants(ctx: StepContext) -> StepOutcome:
    return Complete()


def rules(name: str = "fetch_grants") -> StepRules:
    return StepRules(index=2, name=name, retry=SERVICE, timeout=HOUR)


def test_a_step_s_own_rules_win_then_the_skill_s_then_the_service_s() -> None:
    own = step(fetch_grants, retry=STEPS, timeout=timedelta(minutes=1))
    skill = Skill("s", 1, [fetch_grants, own, step(fetch_grants)], retry=SKILLS, timeout=timedelta(minutes=5))
    plain = Skill("p", 1, [fetch_grants])

    assert rules_for(plain, 0, retry=SERVICE, timeout=HOUR) == StepRules(0, "fetch_grants", SERVICE, HOUR)
    assert rules_for(skill, 0, retry=SERVICE, timeout=HOUR) == StepRules(
        0, "fetch_grants", SKILLS, timedelta(minutes=5)
    )
    assert rules_for(skill, 1, retry=SERVICE, timeout=HOUR) == StepRules(
        1, "fetch_grants", STEPS, timedelta(minutes=1)
    )
    assert rules_for(skill, 2, retry=SERVICE, timeout=HOUR).retry == SKILLS, "an unset part falls back"


def test_step_works_as_a_decorator_and_refuses_a_timeout_that_is_not_positive() -> None:
    decorated = step(timeout=timedelta(seconds=5))(fetch_grants)
    assert decorated.timeout == timedelta(seconds=5)
    assert decorated.fn is fetch_grants
    with pytest.raises(ValueError, match="positive"):
        step(fetch_grants, timeout=timedelta(0))
    with pytest.raises(ValueError, match="positive"):
        Skill("s", 1, [fetch_grants], timeout=timedelta(seconds=-1))


@pytest.mark.parametrize(
    ("causes", "detail", "reason"),
    [
        (["lease_lost"] * 5, "d", "step 2 (fetch_grants) lost its worker 5 times"),
        (["timeout"] * 2, "d", "step 2 (fetch_grants) timed out 2 times"),
        (["timeout"], "d", "step 2 (fetch_grants) timed out once"),
        (["error"] * 3, "KeyError: 'x'", "step 2 (fetch_grants) failed 3 times: KeyError: 'x'"),
        (
            ["error", "lease_lost"],
            "d",
            "step 2 (fetch_grants) failed 2 times; the last attempt lost its worker",
        ),
        (
            ["lease_lost", "error"],
            "E: m",
            "step 2 (fetch_grants) failed 2 times; the last attempt raised: E: m",
        ),
    ],
)
def test_the_reason_names_the_step_the_count_and_the_last_cause(
    causes: list[str], detail: str, reason: str
) -> None:
    assert spent_reason(rules(), causes, detail) == reason  # type: ignore[arg-type]


def test_an_error_that_is_never_retried_says_so() -> None:
    assert never_retried_reason(rules(), "PermissionError: no") == (
        "step 2 (fetch_grants) raised an error that is not retried: PermissionError: no"
    )


def test_an_error_s_detail_hides_every_secret_and_is_cut() -> None:
    error = ValueError("login as admin with hunter2-secret failed; hunter2-secret is wrong")
    assert describe_error(error, ["hunter2-secret", ""]) == (
        f"ValueError: login as admin with {REDACTED} failed; {REDACTED} is wrong"
    )
    assert describe_error(KeyError(), []) == "KeyError"
    long = describe_error(RuntimeError("x" * 2000), [])
    assert len(long) == DETAIL_LIMIT
    assert long.endswith("…")


@given(secret=st.text(min_size=1, max_size=30), around=st.text(max_size=50))
def test_no_secret_survives_in_a_detail(secret: str, around: str) -> None:
    detail = describe_error(RuntimeError(f"{around}{secret}{around}"), [secret])
    assert secret not in detail or secret in f"RuntimeError: {REDACTED}"
