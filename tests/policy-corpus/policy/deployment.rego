# Over the whole deployment (`[policy] deployment_packages`): what no single project's policy can see.
package deployment

import rego.v1

# No release may replace the cluster while applications are deployed on it.
deny contains msg if {
	some cluster in input.projects
	endswith(cluster.path, "/eks")
	some resource in cluster.resources
	resource.action == "replace"
	some app in input.projects
	cluster.path in app.after
	msg := sprintf("%s would replace the cluster while %s is deployed on it", [cluster.path, app.path])
}

# A change to the network is previewed with its dependents' planned values, never deferred.
deny_deferred contains msg if {
	some p in input.projects
	p.deferred
	msg := sprintf("%s was not previewed: it waits on values known only once %s is applied", [p.path, concat(", ", p.waits_on)])
}

# A destroy that would orphan deployed projects is refused.
deny_orphans contains msg if {
	input.operation == "destroy"
	some orphan in input.orphans
	msg := sprintf("destroying %s would orphan %s", [concat(", ", orphan.depends_on), orphan.path])
}

# Planned inputs are seen with their projected values.
warn contains msg if {
	some p in input.projects
	some name in p.projected
	msg := sprintf("%s is previewed with %s as planned", [p.path, name])
}

violation_large contains {"msg": "many projects change", "count": n} if {
	n := count([p | some p in input.projects; p.changes.create + p.changes.update + p.changes.delete > 0])
	n > 3
}

warn_fanned_out contains sprintf("a fanned-out %s by %s", [input.operation, input.who]) if input.fanned_out
