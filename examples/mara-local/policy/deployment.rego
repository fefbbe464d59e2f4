# A policy over the whole deployment, which no single project's policy can see: `mara preview`
# shows what it says, `mara up` is stopped by a denial before anything is applied
# (docs/commands.md, "Policies"). `mara policy test` runs its tests.
package deployment

import rego.v1

# No release may replace the cluster while applications are deployed on it.
deny contains msg if {
	some cluster in input.projects
	cluster.path == "infrastructure/local/cluster"
	some resource in cluster.resources
	resource.action == "replace"
	some app in input.projects
	startswith(app.path, "kubernetes/applications/")
	not app.new_stack
	msg := sprintf("%s would be replaced while %s is deployed on it", [resource.resource, app.path])
}

test_replacing_the_cluster_under_an_application_is_denied if {
	count(deny) == 1 with input as {"projects": [
		{"path": "infrastructure/local/cluster", "resources": [{"resource": "pulumi:pulumi:Stack (cluster)", "action": "replace"}]},
		{"path": "kubernetes/applications/sirius", "resources": [], "new_stack": false},
	]}
}

test_a_first_deployment_is_not_denied if {
	count(deny) == 0 with input as {"projects": [
		{"path": "infrastructure/local/cluster", "resources": [{"resource": "pulumi:pulumi:Stack (cluster)", "action": "replace"}]},
		{"path": "kubernetes/applications/sirius", "resources": [], "new_stack": true},
	]}
}
