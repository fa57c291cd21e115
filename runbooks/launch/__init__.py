"""An engine's command line as the engine reads it: the launch forms a server is started in
(`forms`), each engine's flags (`flag_tables`) and its own argument parsing, to a `ServerConfig`
(`argv`). Pure text: reading a Kubernetes container is `collectors.parsers.flags`."""
