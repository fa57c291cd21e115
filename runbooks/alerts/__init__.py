"""The runbook's alerts as Prometheus rules: pure definitions, per engine (`gpumem rules`).

`engines` says which series each engine exports for them, `promql` builds the expressions
(selectors for both ways an exporter's pods reach Prometheus, the workload labels), `rules`
defines the rules with the runbook's numbers. Wording and file formats are `bot.render.rules`.
"""
