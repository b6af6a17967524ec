"""``access-review``: the quarterly access review, the worked example of the design.

Steps (v1): ``plan, fetch_grants, analyse, ask_approval, apply_revocations, write_report``.

Parameters (a data part of the first message): ``systems`` (default 40), ``fetch_delay_ms``
(default 0), ``revocations`` (default 14), ``fail_after_revocations`` (default none) and
``approval_deadline_s`` (default none: the service's maximum pause).

Checkpoint layout, built up step by step::

    plan       {systems, fetch_delay_ms, revocations, fail_after_revocations, approval_deadline_s}
    fetched    [1, 2, ...]          systems whose grants are in ``grants`` (fetch_grants)
    grants     [{grant_id, system, user, role, last_used_days}, ...]          (fetch_grants)
    proposed   [{grant_id, system, user, role, reason}, ...]                  (analyse)
    questions  number of approval questions asked                             (ask_approval)
    approved   true | false | null: the owners' decision, null until an answer is usable
    applied    [{grant_id, system, user, revocation_id, status}, ...]         (apply_revocations)

Every IAM request carries ``X-Longhaul-Task``; each revocation runs through ``ctx.once`` under
``revoke:<grant_id>``, and the IAM gets the ledger's key as its ``Idempotency-Key``. The revocations
are checked effects (``once(..., check=...)``): a rerun that finds one started but not recorded (the
worker died between ``POST /revocations`` and the record) asks ``GET /revocations/{key}`` first and
records the IAM's answer, posting again only on a 404 (the call never reached the IAM).

The simulated network error (``fail_after_revocations=N``) happens once per task: just before the
revocation after the N-th, the step records the effect ``simulated-network-error`` through
``ctx.once`` and raises :class:`SimulatedNetworkError` only if that call ran the effect now. The
ledger entry is committed before ``once`` returns, so the fact survives the retry and any crash;
the retried step walks the proposals again, gets the first N results from the ledger and applies
only the rest.

The answer to ``ask_approval`` is read by ``apply_revocations``, the step after it. If it is not
``{"approve": true|false}``, that step asks again with ``AskInput(repeat=True)``, so the next
answer resumes ``apply_revocations`` itself; every question has the approval deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import httpx

from domain.skill import AskInput, Complete, Continue, Fail, Reject, Skill, StepContext, StepOutcome
from workers.skills.parts import as_bool, as_int, as_number, first_data, text_artifact

JSON = dict[str, Any]

DEFAULTS: JSON = {
    "systems": 40,
    "fetch_delay_ms": 0,
    "revocations": 14,
    "fail_after_revocations": None,
    "approval_deadline_s": None,
}
MAX_SYSTEMS = 10_000
SIMULATED_ERROR_KEY = "simulated-network-error"
IAM_TIMEOUT_S = 10.0


class SimulatedNetworkError(ConnectionError):
    """The one network error ``fail_after_revocations`` asks for; transient, so the step is retried."""


def parse_plan(params: JSON) -> JSON | str:
    """The validated parameters with their defaults, or a sentence saying what is wrong.

    Values are read as ProtoJSON gives them (``workers.skills.parts.as_int``): ``3.0`` and ``"3"``
    are the integer 3, ``true`` is not; the plan holds the values as read.
    """
    given = {name: params.get(name, default) for name, default in DEFAULTS.items()}
    systems, delay = as_int(given["systems"]), as_number(given["fetch_delay_ms"])
    revocations = as_int(given["revocations"])
    given_failing, given_deadline = given["fail_after_revocations"], given["approval_deadline_s"]
    failing = None if given_failing is None else as_int(given_failing)
    deadline = None if given_deadline is None else as_number(given_deadline)
    if systems is None or not 1 <= systems <= MAX_SYSTEMS:
        return f"systems must be an integer from 1 to {MAX_SYSTEMS}, not {given['systems']!r}"
    if delay is None or delay < 0:
        return f"fetch_delay_ms must be a number of milliseconds >= 0, not {given['fetch_delay_ms']!r}"
    if revocations is None or revocations < 0:
        return f"revocations must be an integer >= 0, not {given['revocations']!r}"
    if given_failing is not None and (failing is None or failing < 0):
        return f"fail_after_revocations must be an integer >= 0 or null, not {given_failing!r}"
    if given_deadline is not None and (deadline is None or deadline <= 0):
        return f"approval_deadline_s must be a number of seconds > 0 or null, not {given_deadline!r}"
    return {
        "systems": systems,
        "fetch_delay_ms": delay,
        "revocations": revocations,
        "fail_after_revocations": failing,
        "approval_deadline_s": deadline,
    }


def read_decision(message: JSON) -> bool | None:
    """The owners' decision in an answer: a data part ``{"approve": true|false}``; else ``None``."""
    data = first_data(message)
    return None if data is None else as_bool(data.get("approve"))


def propose(grants: list[JSON], count: int) -> list[JSON]:
    """The ``count`` grants unused the longest (ties: fetch order), as proposed revocations."""
    stale = sorted(grants, key=lambda g: -int(g.get("last_used_days", 0)))[:count]
    return [
        {
            "grant_id": g["grant_id"],
            "system": g["system"],
            "user": g["user"],
            "role": g.get("role", ""),
            "reason": f"unused for {g.get('last_used_days', 0)} days",
        }
        for g in stale
    ]


def approval_question(checkpoint: JSON, *, again: bool) -> str:
    """The question put to the system owners, listing every proposed revocation."""
    proposed = checkpoint["proposed"]
    lines = []
    if again:
        lines.append(
            'That answer was not understood. Reply with a data part {"approve": true} or {"approve": false}.'
        )
    lines.append(
        f"The access review of {checkpoint['plan']['systems']} systems proposes revoking "
        f"{len(proposed)} grants. Approve? Answer with a data part "
        '{"approve": true} to apply all of them, or {"approve": false} to apply none.'
    )
    lines.append("")
    for p in proposed:
        lines.append(f"- {p['grant_id']}: {p['user']} ({p['role']}) on system {p['system']}, {p['reason']}")
    return "\n".join(lines)


def report(task_id: str, checkpoint: JSON) -> str:
    """The markdown report of a finished review."""
    plan, proposed = checkpoint["plan"], checkpoint["proposed"]
    applied: list[JSON] = checkpoint.get("applied", [])
    fetched, grants = len(checkpoint["fetched"]), len(checkpoint["grants"])
    reviewed = f"{fetched} of {plan['systems']} systems reviewed; {grants} grants read."
    out = [
        "# Access review",
        "",
        f"Task `{task_id}`.",
        "",
        "## Systems reviewed",
        "",
        reviewed,
        "",
        f"## Proposed revocations ({len(proposed)})",
        "",
    ]
    if proposed:
        out += ["| Grant | System | User | Role | Reason |", "|---|---|---|---|---|"]
        out += [_row(p["grant_id"], p["system"], p["user"], p["role"], p["reason"]) for p in proposed]
    else:
        out.append("Nothing to revoke: no revocations were proposed.")
    out += ["", f"## Applied revocations ({len(applied)})", ""]
    if applied:
        out += ["| Grant | System | User | Revocation |", "|---|---|---|---|"]
        out += [_row(a["grant_id"], a["system"], a["user"], a["revocation_id"]) for a in applied]
    elif proposed and checkpoint.get("approved") is False:
        out.append("The system owners declined the proposed revocations: none were applied.")
    else:
        out.append("None.")
    return "\n".join(out) + "\n"


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


class AccessReview:
    """The steps of ``access-review`` v1, bound to one IAM base URL."""

    def __init__(self, iam_url: str | None) -> None:
        self.iam_url = iam_url.rstrip("/") if iam_url else None

    def skill(self) -> Skill:
        """The skill, with the seed's step list."""
        return Skill(
            name="access-review",
            version=1,
            steps=[
                self.plan,
                self.fetch_grants,
                self.analyse,
                self.ask_approval,
                self.apply_revocations,
                self.write_report,
            ],
            description=(
                "Reviews access grants across internal systems, asks the owners to approve the proposed "
                "revocations, applies them through the IAM service once each, and writes a report."
            ),
            tags=("compliance", "iam", "long-running"),
        )

    # ------------------------------------------------------------------ steps

    async def plan(self, ctx: StepContext) -> StepOutcome:
        """Validate the parameters and fix them in the checkpoint."""
        if self.iam_url is None:
            return Fail("access-review needs the IAM service: set LONGHAUL_IAM_URL")
        plan = parse_plan(ctx.params)
        if isinstance(plan, str):
            return Reject(f"access-review: {plan}")
        return Continue({"plan": plan, "fetched": [], "grants": []})

    async def fetch_grants(self, ctx: StepContext) -> StepOutcome:
        """Fetch each system's grants, one commit per system, from the first unfinished one.

        Each system's commit carries a progress message (``Fetched the grants of 3 of 40
        systems.``), so a long review shows how far it got without a commit of its own.
        """
        checkpoint = ctx.checkpoint
        plan = checkpoint["plan"]
        fetched: list[int] = list(checkpoint.get("fetched", []))
        grants: list[JSON] = list(checkpoint.get("grants", []))
        done = set(fetched)
        todo = [n for n in range(1, plan["systems"] + 1) if n not in done]
        async with self._client(ctx) as client:
            for n in todo:
                if plan["fetch_delay_ms"]:
                    await asyncio.sleep(plan["fetch_delay_ms"] / 1000)
                response = await client.get(f"/systems/{n}/grants")
                response.raise_for_status()
                grants = [*grants, *_grant_list(response.json(), n)]
                fetched = [*fetched, n]
                checkpoint = {**checkpoint, "fetched": fetched, "grants": grants}
                if n != todo[-1]:  # the last system's commit is the step's own
                    progress = f"Fetched the grants of {len(fetched)} of {plan['systems']} systems."
                    await ctx.commit(checkpoint, progress=progress)
        return Continue(checkpoint)

    async def analyse(self, ctx: StepContext) -> StepOutcome:
        """Pick the ``revocations`` grants to propose (deterministically)."""
        checkpoint = ctx.checkpoint
        proposed = propose(checkpoint["grants"], checkpoint["plan"]["revocations"])
        return Continue({**checkpoint, "proposed": proposed})

    async def ask_approval(self, ctx: StepContext) -> StepOutcome:
        """Ask the system owners to approve the proposed revocations."""
        checkpoint = {**ctx.checkpoint, "approved": None, "questions": 0}
        if not checkpoint["proposed"]:
            return Continue(checkpoint)
        return self._ask(checkpoint, again=False)

    async def apply_revocations(self, ctx: StepContext) -> StepOutcome:
        """Read the owners' answer and apply each approved revocation exactly once."""
        checkpoint = ctx.checkpoint
        if not checkpoint["proposed"]:
            return Continue({**checkpoint, "applied": []})
        decision = read_decision(ctx.latest_input)
        if decision is None:  # the next answer resumes this step
            return self._ask(checkpoint, again=True)
        applied = await self._apply(ctx, checkpoint) if decision else []
        return Continue({**checkpoint, "approved": decision, "applied": applied})

    async def write_report(self, ctx: StepContext) -> StepOutcome:
        """Complete with the markdown report."""
        checkpoint = ctx.checkpoint
        n_proposed, n_applied = len(checkpoint["proposed"]), len(checkpoint.get("applied", []))
        if not n_proposed:
            message = "nothing to revoke"
        elif checkpoint["approved"]:
            message = f"{n_applied} of {n_proposed} proposed revocations applied"
        else:
            message = f"the owners declined all {n_proposed} proposed revocations"
        text = report(ctx.task_id, checkpoint)
        artifact = text_artifact("report", "access-review.md", text, "text/markdown")
        return Complete(artifacts=[artifact], message=f"Access review complete: {message}.")

    # ------------------------------------------------------------------ helpers

    def _client(self, ctx: StepContext) -> httpx.AsyncClient:
        if self.iam_url is None:
            raise RuntimeError("access-review needs the IAM service: set LONGHAUL_IAM_URL")
        return httpx.AsyncClient(
            base_url=self.iam_url, headers={"X-Longhaul-Task": ctx.task_id}, timeout=IAM_TIMEOUT_S
        )

    def _ask(self, checkpoint: JSON, *, again: bool) -> AskInput:
        deadline_s = checkpoint["plan"]["approval_deadline_s"]
        asked = {**checkpoint, "approved": None, "questions": checkpoint.get("questions", 0) + 1}
        return AskInput(
            question=approval_question(checkpoint, again=again),
            checkpoint=asked,
            deadline=None if deadline_s is None else timedelta(seconds=deadline_s),
            on_deadline="fail",
            data={"proposedRevocations": checkpoint["proposed"], "answer": {"approve": "boolean"}},
            repeat=again,
        )

    async def _apply(self, ctx: StepContext, checkpoint: JSON) -> list[JSON]:
        fail_after = checkpoint["plan"]["fail_after_revocations"]
        applied: list[JSON] = []
        async with self._client(ctx) as client:
            for index, proposal in enumerate(checkpoint["proposed"]):
                if index == fail_after:
                    await _simulate_network_error_once(ctx, index)
                key = f"revoke:{proposal['grant_id']}"
                revoke, check = _revocation(client, proposal)
                applied.append(await ctx.once(key, revoke, check=check))
        return applied


def _revocation(
    client: httpx.AsyncClient, proposal: JSON
) -> tuple[Callable[[str], Awaitable[JSON]], Callable[[str], Awaitable[JSON | None]]]:
    """The revocation of ``proposal`` for ``ctx.once``, and its check: did the IAM apply it?"""
    body = {"system": proposal["system"], "grant_id": proposal["grant_id"], "user": proposal["user"]}

    def applied(answer: JSON) -> JSON:
        return {**body, "revocation_id": answer["revocation_id"], "status": answer["status"]}

    async def revoke(idempotency_key: str) -> JSON:
        response = await client.post("/revocations", json=body, headers={"Idempotency-Key": idempotency_key})
        response.raise_for_status()
        return applied(response.json())

    async def check(idempotency_key: str) -> JSON | None:
        response = await client.get(f"/revocations/{quote(idempotency_key, safe='')}")
        if response.status_code == httpx.codes.NOT_FOUND:  # the POST never reached the IAM
            return None
        response.raise_for_status()
        return applied(response.json())

    return revoke, check


async def _simulate_network_error_once(ctx: StepContext, applied: int) -> None:
    ran_now = False

    async def note(_key: str) -> JSON:
        nonlocal ran_now
        ran_now = True
        return {"error": "simulated network error", "after_revocations": applied}

    await ctx.once(SIMULATED_ERROR_KEY, note)  # committed to the ledger before it returns
    if ran_now:
        raise SimulatedNetworkError(
            f"simulated network error after {applied} revocations (fail_after_revocations)"
        )


def _grant_list(body: object, system: int) -> list[JSON]:
    if not isinstance(body, list) or not all(isinstance(g, dict) and "grant_id" in g for g in body):
        raise ValueError(f"GET /systems/{system}/grants: the IAM's answer is not a list of grants")
    return [
        {
            "grant_id": g["grant_id"],
            "system": g.get("system", system),
            "user": g.get("user", ""),
            "role": g.get("role", ""),
            "last_used_days": g.get("last_used_days", 0),
        }
        for g in body
    ]


def access_review_skill(iam_url: str | None) -> Skill:
    """``access-review`` v1 against the IAM at ``iam_url`` (``None``: tasks fail with a clear message)."""
    return AccessReview(iam_url).skill()
