# A policy over each module's own plan, as conftest reads Terraform plans (`terraform show
# -json`): `mara preview` shows what it says, `mara up` is stopped by a denial before anything
# is applied (docs/commands.md, "Policies"). `mara policy test` runs its tests.
package main

import rego.v1

# The app runs on at least two replicas, and at most twenty. (A plan holds its variables as
# they were given: mara gives them as TF_VAR_*, text, hence `to_number`.)
deny contains msg if {
	replicas := to_number(input.variables.replicas.value)
	not replicas_in_range(replicas)
	msg := sprintf("%v replicas: between 2 and 20, please", [replicas])
}

replicas_in_range(n) if {
	n >= 2
	n <= 20
}

test_one_replica_is_denied if {
	count(deny) == 1 with input as {"variables": {"replicas": {"value": "1"}}}
}

test_three_replicas_pass if {
	count(deny) == 0 with input as {"variables": {"replicas": {"value": "3"}}}
}
