# A simulated application on the network: the network's outputs reach it as inputs
# (`[project.inputs]` in providers/local-tf.toml), as TF_VAR_subnets and TF_VAR_network_name,
# from what the network's last `up` recorded — it needs no access to the network's state.

variable "replicas" {
  type        = number
  description = "How many replicas (app:replicas)"
}

variable "subnets" {
  type        = list(string)
  description = "The network's subnets (input: network:subnets)"
}

variable "network_name" {
  type        = string
  description = "The network's name (input: network:network_name)"
}

output "subnet" {
  value = var.subnets[0]
}

output "url" {
  value = "https://app.${var.network_name}.localhost"
}

output "replicas" {
  value = var.replicas
}
