"""The difference of two offline plans for a reviewer: what `pulumi up` would replace (``-/+``),
update in place (``~``), add and remove, the GPU AZ move and the cost first (`python -m infra diff`)."""
