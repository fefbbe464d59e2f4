//! The workspace `mara init` writes in a directory without projects (docs/commands.md, "init"):
//! a Terraform module that needs no cloud account and no download (variables and outputs only)
//! and a command project after it that takes one of its outputs, the stack `dev`, and its
//! configuration — runnable with `mara up --yes` wherever Terraform is on PATH.

/// Each file, relative to the workspace's root, and what it holds.
pub const FILES: [(&str, &str); 6] = [
    ("mara.toml", MARA_TOML),
    ("providers/starter.toml", PROVIDER),
    ("network/main.tf", NETWORK),
    ("config/pulumi/environment", ENVIRONMENT),
    ("config/pulumi/Pulumi.dev.yaml", STACK_CONFIG),
    (".gitignore", GITIGNORE),
];

const MARA_TOML: &str = r#"# mara's settings for this workspace (docs/formats.md, "mara.toml"); every key is optional.
# The provider that lists this workspace's projects: providers/starter.toml.
provider = "starter"
"#;

const PROVIDER: &str = r#"# The projects of this workspace and the order between them (docs/formats.md, "Providers").
description = "A starter: a Terraform module, and a command that takes one of its outputs"
infra_type = "starter"

# A Terraform root module: its variables come from the stack's configuration as
# `network:<variable>` (config/pulumi/Pulumi.dev.yaml), each stack a Terraform workspace.
[[project]]
path = "network"
description = "A network, simulated: variables and outputs only (no cloud account needed)"
stage = "infrastructure"
engine = "terraform"

# A shell command run after the network, given its output `network_name` as
# MARA_INPUT_NETWORK_NAME (the input implies the order: network, then app).
[[project]]
path = "app"
description = "An application: a command told where it runs"
engine = "command"
up = 'echo "deploying the application onto $MARA_INPUT_NETWORK_NAME"'
destroy = 'echo "removing the application from $MARA_INPUT_NETWORK_NAME"'

[project.inputs]
network_name = "network:network_name"
"#;

const NETWORK: &str = r#"# A simulated network: only variables and outputs, so that it needs no provider download.

variable "cidr" {
  type        = string
  description = "The network's address range (network:cidr in the stack's configuration)"
}

output "cidr" {
  value = var.cidr
}

output "subnets" {
  value = [for i in range(2) : cidrsubnet(var.cidr, 8, i)]
}

output "network_name" {
  value = "network-${terraform.workspace}"
}
"#;

const ENVIRONMENT: &str = r#"# The stack every command works on unless -s/--stack names another. Credentials for real
# clouds may go here too: then keep this file out of version control.
PULUMI_STACK=dev
"#;

const STACK_CONFIG: &str = r#"config:
  kubernetes:infra_type: starter
  network:cidr: 10.20.0.0/16
"#;

const GITIGNORE: &str = r#"# mara's own state: the run ledger, logs, plans (it ignores itself too)
.mara/
# Terraform's working files and local state
.terraform/
.terraform.lock.hcl
terraform.tfstate.d/
*.tfstate
*.tfstate.backup
"#;
