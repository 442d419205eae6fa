"""Unit tests of the policy rules: each rejects a bad resource and passes a good one."""
