"""The command grammar: one argparse tree for `gpumem VERB` and `/gpumem VERB` (`commands`,
`remediation`, `argtypes`), the Slack rules on top of it (`slack`), and the frozen typed
request each command line becomes (`requests`). The only package that speaks argparse."""
