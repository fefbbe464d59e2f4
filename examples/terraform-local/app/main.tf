# A simulated application on the network: it reads the network module's outputs from its state.
terraform {
  backend "local" {}
}

variable "replicas" {
  type        = number
  description = "How many replicas (app:replicas)"
}

data "terraform_remote_state" "network" {
  backend   = "local"
  workspace = terraform.workspace
  config = {
    path          = "${path.module}/../network/terraform.tfstate"
    workspace_dir = "${path.module}/../network/terraform.tfstate.d"
  }
}

output "subnet" {
  value = data.terraform_remote_state.network.outputs.subnets[0]
}

output "url" {
  value = "https://app.${data.terraform_remote_state.network.outputs.network_name}.localhost"
}

output "replicas" {
  value = var.replicas
}
