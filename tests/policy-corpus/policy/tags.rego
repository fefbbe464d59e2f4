# A second per-project package (`[policy] packages`), with a helper function.
package terraform.tags

import rego.v1

required := {"owner", "team"}

missing(tags) := required - {k | some k, _ in tags}

deny contains msg if {
	some resource in input.resource_changes
	startswith(resource.type, "aws_")
	"create" in resource.change.actions
	gone := missing(object.get(resource.change.after, "tags", {}))
	count(gone) > 0
	msg := sprintf("%s lacks the tags %s", [resource.address, concat(", ", sort(gone))])
}

warn contains "the plan was made by an older Terraform" if {
	semver.compare(trim_prefix(input.terraform_version, "v"), "1.5.0") < 0
}
