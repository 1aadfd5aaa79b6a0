# A Kubernetes GPU node AMI: an Ubuntu 22.04 or Amazon Linux 2023 source AMI, the
# collection's bake playbook (driver, toolkit, node services, runtime config, first boot,
# cleanup), no GPU needed on the build instance. See README.md and docs/bake.md.

variable "region" {
  type    = string
  default = "us-east-1"
}

# ubuntu-22.04 or al2023: which source AMI to start from.
variable "os" {
  type    = string
  default = "ubuntu-22.04"
}

variable "source_ami_filters" {
  type = map(object({ name = string, owner = string, ssh_username = string }))
  default = {
    "ubuntu-22.04" = {
      name         = "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*"
      owner        = "099720109477" # Canonical
      ssh_username = "ubuntu"
    }
    "al2023" = {
      name         = "al2023-ami-2023.*-kernel-6.1-x86_64"
      owner        = "137112412989" # Amazon
      ssh_username = "ec2-user"
    }
  }
}

# The build needs no GPU: a general-purpose instance builds the driver with DKMS.
variable "instance_type" {
  type    = string
  default = "m6i.large"
}

variable "ami_name_prefix" {
  type    = string
  default = "gpunode"
}

# Extra variables for the bake playbook (driver branch, toolkit version, stage switches...).
variable "bake_extra_vars" {
  type    = string
  default = "nvidia_driver_branch=580 nvidia_container_toolkit_version=1.19.1-1"
}

locals {
  source    = var.source_ami_filters[var.os]
  timestamp = regex_replace(timestamp(), "[- TZ:]", "")
}

source "amazon-ebs" "gpu_node" {
  region        = var.region
  instance_type = var.instance_type
  ami_name      = "${var.ami_name_prefix}-${var.os}-${local.timestamp}"
  ssh_username  = local.source.ssh_username
  source_ami_filter {
    filters = {
      name                = local.source.name
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = [local.source.owner]
    most_recent = true
  }
  launch_block_device_mappings {
    device_name           = "/dev/sda1"
    volume_size           = 40
    volume_type           = "gp3"
    iops                  = 3000
    throughput            = 125
    delete_on_termination = true
  }
  tags = {
    Name      = "${var.ami_name_prefix}-${var.os}"
    BakedWith = "gpunode.nvidia bake"
  }
}

build {
  sources = ["source.amazon-ebs.gpu_node"]

  provisioner "ansible" {
    # The collection's bake playbook by name (bake.yml imports gpunode.nvidia.bake).
    playbook_file = "${path.root}/bake.yml"
    # Packer names the host "default"; the bake playbook targets image_builders.
    groups    = ["image_builders"]
    user      = local.source.ssh_username
    use_proxy = false
    extra_arguments = [
      "--extra-vars", var.bake_extra_vars,
      # Packer 1.6's SSH proxy offers only an ssh-rsa host key, which OpenSSH 8.8 and later
      # refuse by default (harmless with use_proxy = false and with newer plugins).
      "--ssh-extra-args", "-o HostKeyAlgorithms=+ssh-rsa -o PubkeyAcceptedKeyTypes=+ssh-rsa",
    ]
    ansible_env_vars = ["ANSIBLE_PIPELINING=True"]
  }
}
