# The same bake on Packer's docker builder: the image is a systemd node container
# (local/gpunode-node:bookworm, tests/testbed/node-image.sh), booted during the build like
# a build VM, then committed and tagged. Used by tests/integration/test_bake_pipeline.py.

variable "source_image" {
  type    = string
  default = "local/gpunode-node:bookworm"
}

variable "image_repository" {
  type    = string
  default = "local/gpunode-bake-node"
}

variable "image_tag" {
  type    = string
  default = "latest"
}

# Extra variables for the bake playbook: JSON, k=v pairs or "@file" (one --extra-vars argument).
variable "bake_extra_vars" {
  type    = string
  default = "{}"
}

# Commands run in the build container before the bake (the tests prepare their stand-ins).
variable "prepare_commands" {
  type    = list(string)
  default = ["true"]
}

# Host directories mounted into the build container (not committed into the image).
variable "volumes" {
  type    = map(string)
  default = {}
}

# Commands run in the build container after the bake, before the commit.
variable "finish_commands" {
  type    = list(string)
  default = ["true"]
}

variable "ansible_playbook" {
  type    = string
  default = "ansible-playbook"
}

source "docker" "gpu_node" {
  image  = var.source_image
  pull   = false
  commit = true
  # Boot systemd in the build container, as a build VM would (same flags as the test nodes).
  run_command = [
    "-d", "-i", "-t", "--network", "host", "--cgroupns", "host",
    "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--tmpfs", "/run", "--tmpfs", "/run/lock",
    "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
    "--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN", "--cap-add", "SYS_PTRACE", "--cap-add", "MKNOD",
    "--cap-add", "SYS_CHROOT", "--cap-add", "SETFCAP", "--cap-add", "AUDIT_WRITE", "--cap-add", "SYS_NICE",
    "--name", "${var.image_repository == "local/gpunode-bake-node" ? "gpunode-bake-build" : "gpunode-bake-build-${var.image_tag}"}",
    "{{.Image}}", "/sbin/init",
  ]
  volumes = var.volumes
  changes = ["CMD [\"/sbin/init\"]", "ENV container=docker"]
}

build {
  sources = ["source.docker.gpu_node"]

  # The shell provisioner uploads its script before systemd has booted in the container, and
  # systemd-tmpfiles empties /tmp at boot: the script would vanish under it. /var/tmp is kept.
  provisioner "shell" {
    remote_folder = "/var/tmp"
    inline        = var.prepare_commands
  }

  provisioner "ansible" {
    command       = var.ansible_playbook
    playbook_file = "${path.root}/bake.yml"
    groups        = ["image_builders"]
    extra_arguments = [
      "--extra-vars", "ansible_python_interpreter=/usr/bin/python3",
      "--extra-vars", var.bake_extra_vars,
      # Packer 1.6's SSH proxy offers only an ssh-rsa host key, which current OpenSSH refuses.
      "--ssh-extra-args", "-o HostKeyAlgorithms=+ssh-rsa -o PubkeyAcceptedKeyTypes=+ssh-rsa",
    ]
    ansible_env_vars = ["ANSIBLE_PIPELINING=True"]
  }

  provisioner "shell" {
    remote_folder = "/var/tmp"
    inline        = var.finish_commands
  }

  post-processor "docker-tag" {
    repository = var.image_repository
    tags       = [var.image_tag]
  }
}
