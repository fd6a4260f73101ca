"""python_sdk1_oauth.py's flow with oidc-provider (oidc_provider.mjs, OpenID Certified)
as the authorization server: the SDK registers itself (RFC 7591), the scripted user logs
in and consents on the provider's pages, and access tokens are JWTs for our URL by
resource indicator (RFC 8707). Usage: python python_sdk1_oidc.py BINARY, with
MCP_TASKD_NODE and MCP_TASKD_OIDC (oidc_provider.mjs, where oidc-provider is installed)."""

import sys

from python_sdk1_oauth import main

if __name__ == "__main__":
    sys.exit(main("python-sdk-1.x-oidc", "MCP_TASKD_OIDC", dynamic=True))
