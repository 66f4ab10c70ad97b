"""The analysis of finished runs, one command each (``python -m bench.analysis COMMAND``,
`bench.analysis.cli`); what the commands share: `bench.analysis.runs`, `bench.analysis.common`."""
