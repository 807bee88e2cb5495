"""Ansible callback plugins of tritonops drift (loaded by path: ANSIBLE_CALLBACK_PLUGINS)."""
