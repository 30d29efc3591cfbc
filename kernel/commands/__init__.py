"""Command-line subcommands; each module owns one group and its exit codes."""
