"""The review wing: offline plans, their diff and cost, the stack runner and the policy rules.

It builds on the core and on the stack program (through ``stackrun``); it never imports the CLI
or the lab.
"""
