"""The Pulumi program's entry and the tooling around it: instance catalog, version pins, offline plan."""
