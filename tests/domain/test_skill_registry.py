"""Skills are (name, version, steps); the registry finds the newest or an exact version."""

from __future__ import annotations

import dataclasses

import pytest

from domain.skill import Continue, Skill, SkillRegistry, StepContext, StepOutcome, UnknownSkillError


async def noop(context: StepContext) -> StepOutcome:
    return Continue(checkpoint=dict(context.checkpoint))


def skill(name: str = "echo", version: int = 1, steps: int = 1) -> Skill:
    return Skill(name=name, version=version, steps=[noop] * steps)


@pytest.mark.parametrize(
    ("name", "version", "steps", "message"),
    [
        ("", 1, 1, "name"),
        ("echo", 0, 1, "versions start at 1"),
        ("echo", -1, 1, "versions"),
        ("echo", 1, 0, "no steps"),
    ],
)
def test_a_skill_needs_a_name_a_positive_version_and_steps(
    name: str, version: int, steps: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        skill(name, version, steps)


def test_a_skill_is_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        skill().version = 2  # type: ignore[misc]


def test_newest_is_the_highest_version_whatever_the_registration_order() -> None:
    registry = SkillRegistry([skill("review", 2), skill("review", 7), skill("review", 1)])

    assert registry.newest("review").version == 7
    assert registry.get("review", 2).version == 2
    assert registry.has("review", 1)
    assert not registry.has("review", 3)


def test_a_task_pinned_to_an_old_version_still_finds_it() -> None:
    old, new = skill("review", 1, steps=2), skill("review", 2, steps=3)
    registry = SkillRegistry([old, new])

    assert registry.get("review", 1) is old
    assert registry.newest("review") is new


def test_registering_a_version_twice_is_an_error() -> None:
    registry = SkillRegistry([skill("echo", 1)])

    with pytest.raises(ValueError, match="twice"):
        registry.register(skill("echo", 1))
    registry.register(skill("echo", 2))
    assert [s.version for s in registry.all()] == [1, 2]


def test_unknown_skills_and_versions_are_lookup_errors_that_name_what_is_known() -> None:
    registry = SkillRegistry([skill("echo"), skill("research")])

    with pytest.raises(UnknownSkillError, match="known: echo, research"):
        registry.newest("nope")
    with pytest.raises(UnknownSkillError, match="v9"):
        registry.get("echo", 9)
    with pytest.raises(UnknownSkillError):
        registry.get("nope", 1)
    assert issubclass(UnknownSkillError, LookupError)
    assert not registry.has("nope", 1)


def test_an_empty_registry_says_it_knows_none() -> None:
    with pytest.raises(UnknownSkillError, match="known: none"):
        SkillRegistry().newest("echo")


def test_all_lists_every_version_sorted_by_name_then_version() -> None:
    registry = SkillRegistry([skill("b", 2), skill("a", 3), skill("b", 1), skill("a", 1)])

    assert [(s.name, s.version) for s in registry.all()] == [("a", 1), ("a", 3), ("b", 1), ("b", 2)]
