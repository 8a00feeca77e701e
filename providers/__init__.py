"""Pulumi dynamic providers: resources no provider package offers the way the stack needs them (boto3 allowed here)."""
