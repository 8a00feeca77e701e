"""One pulumi.ComponentResource per concern. Components know nothing of stack config or boto3."""
