"""Plans: several items run in order, each verified on its own patch and committed by
code-runner, with their state kept in a crash-safe store.

This face holds what other layers use: reading and checking a plan file, the user's
command approvals, and the store.
"""

from code_runner.plans.checks import CommandCheck, Validation, validate_data, validate_file
from code_runner.plans.commands import Approvals, CommandSyntax, tokenize, user_approvals
from code_runner.plans.model import Plan, plan_json_schema
from code_runner.plans.projection import BaseTree, check_source, read_base_tree

__all__ = [
    "Approvals",
    "BaseTree",
    "CommandCheck",
    "CommandSyntax",
    "Plan",
    "Validation",
    "check_source",
    "plan_json_schema",
    "read_base_tree",
    "tokenize",
    "user_approvals",
    "validate_data",
    "validate_file",
]
