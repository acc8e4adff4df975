"""Code generated from proto/baton/v1/api.proto by tools/generate_stubs.py. Do not edit."""
