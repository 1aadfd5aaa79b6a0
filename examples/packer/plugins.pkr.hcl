# Plugins for current Packer (1.7 and later): `packer init .` installs them.
# Packer 1.6 (Debian 12's package) has both built in and does not read this block:
# validate gpu-node-ami.pkr.hcl alone there (see README.md).
packer {
  required_version = ">= 1.7.0"
  required_plugins {
    amazon = {
      source  = "github.com/hashicorp/amazon"
      version = ">= 1.2.0"
    }
    ansible = {
      source  = "github.com/hashicorp/ansible"
      version = ">= 1.1.0"
    }
  }
}
