"""Helpers for testing sampleforge and for users' own fault drills (see `faulty_envs`)."""

from sampleforge.testing.faulty_envs import (
    FAULTS,
    FaultyEnv,
    InjectedFault,
    claim_marker,
    make_faulty_env,
    read_marker,
    register_faulty_env,
)

__all__ = [
    "FAULTS",
    "FaultyEnv",
    "InjectedFault",
    "claim_marker",
    "make_faulty_env",
    "read_marker",
    "register_faulty_env",
]
