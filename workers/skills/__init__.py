"""The skills that ship with longhaul (``builtin_skills``), and ``conformance`` for the TCK.

Skills import only ``domain`` and ``httpx``; the worker runtime makes their steps durable.
"""

from __future__ import annotations

from domain.skill import Skill
from workers.skills.access_review import access_review_skill
from workers.skills.big_file import BIG_FILE
from workers.skills.checksum import CHECKSUM
from workers.skills.conformance import conformance_skills
from workers.skills.echo import ECHO
from workers.skills.research import RESEARCH, RESEARCH_V1


def builtin_skills(iam_url: str | None) -> list[Skill]:
    """Every built-in skill; ``access-review`` calls the IAM at ``iam_url`` (``LONGHAUL_IAM_URL``)."""
    return [
        ECHO,
        access_review_skill(iam_url),
        RESEARCH_V1,
        RESEARCH,
        BIG_FILE,
        CHECKSUM,
        *conformance_skills(),
    ]


__all__ = ["builtin_skills"]
