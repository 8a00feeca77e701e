"""Checks of the planned objects against the rules of the APIs that will receive them (issue 37).

AWS (``aws_model``): every input of every AWS resource the plan records, translated onto the request
shape of the API call that creates it (``aws_table``: the mapping, data; ``translate``) and walked against the
service models botocore ships (``shapes``: lengths, patterns, enums, ranges, list and map sizes,
required members; ``java_regex``: the models' Java-style patterns in Python's ``re``).
Kubernetes (``kube_check``): every object against the API server's own rules (``kube_rules``,
``kube_objects``) and every custom object against its CRD, schema and CEL rules (``kube_crds``).
Only the offline plan imports this package; what `pulumi up` runs never does.
"""
