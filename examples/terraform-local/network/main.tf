# A simulated network: only inputs and outputs, so that it needs no provider download.

variable "cidr" {
  type        = string
  description = "The network's address range (network:cidr)"
}

variable "name" {
  type    = string
  default = "mara"
}

output "cidr" {
  value = var.cidr
}

output "subnets" {
  value = [for i in range(2) : cidrsubnet(var.cidr, 8, i)]
}

output "network_name" {
  value = "${var.name}-${terraform.workspace}"
}
