# As conftest's documentation writes policies for Terraform plans (`terraform show -json`).
package main

import rego.v1

# Resources that may never be created.
denied_types := {"terraform_data_forbidden", "aws_iam_access_key"}

deny contains msg if {
	some resource in input.resource_changes
	resource.type in denied_types
	"create" in resource.change.actions
	msg := sprintf("%s: %s may not be created", [resource.address, resource.type])
}

# Nothing is deleted on the production stack.
deny_delete_in_prod contains msg if {
	input.mara.stack == "prod"
	some resource in input.resource_changes
	"delete" in resource.change.actions
	msg := sprintf("%s would be deleted on prod", [resource.address])
}

# A route to everywhere is refused, with details (conftest's `violation`).
violation contains {"msg": msg, "address": resource.address, "input": resource.change.after.input} if {
	some resource in input.resource_changes
	resource.type == "terraform_data"
	resource.change.after.input == "0.0.0.0/0"
	msg := sprintf("%s routes to everywhere", [resource.address])
}

# The form of conftest's own examples: `input.resource_changes[_]`.
deny_unnamed_data contains msg if {
	resource := input.resource_changes[_]
	resource.type == "terraform_data"
	resource.change.after.input == ""
	msg := sprintf("%s has an empty input", [resource.address])
}

# Replacing a resource is shown.
warn contains msg if {
	some resource in input.resource_changes
	"delete" in resource.change.actions
	"create" in resource.change.actions
	msg := sprintf("%s will be replaced", [resource.address])
}

warn_many_changes contains msg if {
	changed := [r | some r in input.resource_changes; r.change.actions != ["no-op"]]
	count(changed) > 2
	msg := sprintf("%d resources change in one plan", [count(changed)])
}

# Pulumi's preview digest: a step that replaces.
deny_pulumi_replace contains msg if {
	some step in input.steps
	step.op == "replace"
	contains(step.urn, "eks:index:Cluster")
	msg := sprintf("the cluster %s would be replaced", [step.urn])
}

# Tests of the rules above, as `opa test` and `mara policy test` run them.
test_denied_type_is_denied if {
	count(deny) == 1 with input as {"resource_changes": [{"address": "aws_iam_access_key.k", "type": "aws_iam_access_key", "change": {"actions": ["create"]}}]}
}

test_allowed_type_passes if {
	count(deny) == 0 with input as {"resource_changes": [{"address": "aws_s3_bucket.b", "type": "aws_s3_bucket", "change": {"actions": ["create"]}}]}
}
