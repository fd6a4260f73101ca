"""Python SDK `mcp` 1.x doing the whole OAuth dance with its default OAuth support
(`OAuthClientProvider`, issue 32) against mcp-taskd as a protected resource, with a real
authorization server as the issuer: oauth_idp.mjs (oauth2-mock-server, headless; the
client is registered beforehand), or with python_sdk1_oidc.py oidc_provider.mjs
(oidc-provider, OpenID Certified: the SDK registers itself dynamically, and the scripted
user logs in and consents on its pages):

1. the first request gets 401; the SDK reads the protected-resource metadata it names,
   the issuer's metadata, and gets a token by authorization code + PKCE for our URL (the
   user's browser is scripted: it follows the authorization URL, fills in the provider's
   login and consent forms if it has any, and the callback reads the code off the
   redirect back);
2. it calls a tool and creates a 2025-11-25 task;
3. once its token has expired (the issuer says it lasts 2 s), the next request refreshes
   it, and the new token reads the same task back: tasks belong to the person, not the
   token;
4. step-up: a tool needing a scope the token lacks answers 403 insufficient_scope; the
   SDK gets a token with that scope and the call succeeds. (With dynamic registration
   the server lists every scope and the token has it from the start: see `main`.)

Usage: python python_sdk1_oauth.py BINARY (the py1 venv of .ci/interop-setup.sh), with
MCP_TASKD_NODE (node) and MCP_TASKD_IDP (oauth_idp.mjs, in a folder where
oauth2-mock-server is installed); python_sdk1_oidc.py BINARY with MCP_TASKD_OIDC
(oidc_provider.mjs, where oidc-provider is installed)."""

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urljoin, urlparse

import anyio
import httpx
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from mcp.types import CallToolResult

NAME = "python-sdk-1.x-oauth"
warnings.filterwarnings("ignore", category=DeprecationWarning)
REDIRECT_URI = "http://127.0.0.1:9/callback"


class MemoryStorage(TokenStorage):
    """A host's token store; with `registered`, the client is registered beforehand (an
    issuer without dynamic registration), else the SDK registers it."""

    def __init__(self, registered: bool) -> None:
        self.tokens: OAuthToken | None = None
        self.client = (
            OAuthClientInformationFull(
                client_id=NAME, redirect_uris=[REDIRECT_URI], token_endpoint_auth_method="none"
            )
            if registered
            else None
        )

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:  # noqa: D102
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class ScriptedBrowser:
    """The user's browser: follows the authorization URL, keeping the provider's cookies,
    submits each form the provider shows (a login form gets a user name and a password;
    a consent form is accepted as it is), and hands the code and state of the redirect
    back on to the SDK's callback."""

    def __init__(self) -> None:
        self.redirect: str | None = None
        self.logins = 0

    async def open(self, authorization_url: str) -> None:
        async with httpx.AsyncClient() as browser:
            answer = await browser.get(authorization_url)
            for _ in range(12):
                if answer.status_code in (302, 303):
                    location = urljoin(str(answer.request.url), answer.headers["location"])
                    if location.startswith(REDIRECT_URI):
                        self.redirect = location
                        self.logins += 1
                        return
                    answer = await browser.get(location)
                elif answer.status_code == 200 and "<form" in answer.text:
                    action, fields = form_of(answer.text)
                    if "login" in fields:
                        fields.update(login="alice", password="any password")
                    answer = await browser.post(urljoin(str(answer.request.url), action), data=fields)
                else:
                    detail = re.findall(r"<pre>(.*?)</pre>", answer.text, re.S) or [answer.text[:300]]
                    raise AssertionError(f"authorize: HTTP {answer.status_code}: {detail} ({answer.request.url})")
        raise AssertionError("authorize: no redirect back after 12 steps")

    async def callback(self) -> tuple[str, str | None]:
        assert self.redirect and self.redirect.startswith(REDIRECT_URI), f"redirect: {self.redirect}"
        assert "code=" in self.redirect, f"the provider refused: {self.redirect}"
        query = parse_qs(urlparse(self.redirect).query)
        return query["code"][0], query.get("state", [None])[0]


def form_of(page: str) -> tuple[str, dict[str, str]]:
    """The first form of an HTML page: its action, and its fields (hidden ones with
    their values, others empty)."""
    form = re.search(r"<form[^>]*action=\"([^\"]*)\"[^>]*>(.*?)</form>", page, re.S)
    assert form, f"no form: {page[:300]}"
    fields = {}
    for field in re.finditer(r"<input[^>]*>", form.group(2)):
        name = re.search(r'name="([^"]*)"', field.group(0))
        value = re.search(r'value="([^"]*)"', field.group(0))
        if name:
            fields[name.group(1)] = value.group(1) if value else ""
    return form.group(1), fields


class Issuer:
    """The authorization server's script, started with node. oauth_idp.mjs prints a
    GRANT line per token it grants, read as they come."""

    def __init__(self, script: str) -> None:
        node = os.environ.get("MCP_TASKD_NODE", "node")
        self.process = subprocess.Popen(
            [node, script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            # Access tokens that say they last 2 s (EXPIRES_IN: oauth_idp.mjs;
            # ACCESS_TOKEN_TTL: oidc_provider.mjs).
            env={**os.environ, "EXPIRES_IN": "2", "ACCESS_TOKEN_TTL": "2"},
        )
        line = self.process.stdout.readline()
        assert line.startswith("ISSUER "), f"issuer said {line!r}"
        self.url = line.split()[1]

    def rotate(self) -> None:
        """oidc_provider.mjs: a fresh signing key from now on."""
        self.process.stdin.write("rotate\n")
        self.process.stdin.flush()
        while (line := self.process.stdout.readline()) and line.strip() != "ROTATED":
            pass

    def stop(self) -> None:
        self.process.stdin.close()
        self.process.wait(10)


def start_server(
    binary: str, work: Path, issuer: str, scopes_supported: list[str], introspection: bool
) -> tuple[subprocess.Popen, str]:
    extra = ""
    if introspection:
        # oidc_provider.mjs's confidential client for introspection; a key set checked
        # again after 0.5 s for an unknown key (the rotation step).
        (work / "secret").write_text("introspection secret\n")
        extra = (
            f'introspection_endpoint = "{issuer}/token/introspection"\n'
            'client_id = "mcp-taskd"\nclient_secret_file = "secret"\njwks_cooldown_ms = 500\n'
        )
    (work / "config.toml").write_text(
        f'[auth.oauth]\nissuer = "{issuer}"\nscopes_supported = {json.dumps(scopes_supported)}\n'
        f"{extra}\n"
        "[[tools]]\n"
        'name = "guarded"\ndescription = "needs deploy:write"\ntask_policy = "inline"\n'
        'scopes = ["deploy:write"]\n'
        'command = ["/bin/sh", "-c", "cat >/dev/null; '
        'echo \'{\\"result\\": {\\"content\\": [{\\"type\\": \\"text\\", \\"text\\": \\"deployed\\"}]}}\'"]\n'
    )
    server = subprocess.Popen(
        [binary, "serve", "--config", str(work / "config.toml"), "--listen", "127.0.0.1:0",
         "--data-dir", str(work / "data")],
        stdout=subprocess.PIPE,
        text=True,
    )
    for line in server.stdout:
        match = re.search(r"listening on (http:\S+)", line)
        if match:
            return server, match.group(1)
    raise AssertionError(f"mcp-taskd exited with {server.wait()}")


async def flow(url: str, dynamic: bool, issuer: Issuer) -> None:
    browser = ScriptedBrowser()
    storage = MemoryStorage(registered=not dynamic)
    provider = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(redirect_uris=[REDIRECT_URI], client_name=NAME),
        storage=storage,
        redirect_handler=browser.open,
        callback_handler=browser.callback,
    )
    with anyio.fail_after(30):
        async with httpx.AsyncClient(auth=provider, timeout=20) as http:
            async with streamable_http_client(url, http_client=http) as (read, write, _):
                async with ClientSession(read, write) as session:
                    await steps(session, browser, storage, provider, dynamic)
                    if dynamic:
                        await rotation(session, storage, provider, issuer)
    if dynamic:
        await introspection(url, issuer)


def scopes(storage: MemoryStorage) -> set[str]:
    return set((storage.tokens.scope or "").split())


async def steps(session, browser, storage, provider, dynamic: bool) -> None:
    # 1. The dance, on the first request.
    await session.initialize()
    assert browser.logins == 1, f"{browser.logins} authorizations"
    assert "mcp:use" in scopes(storage), f"granted {scopes(storage)}"
    first_token = storage.tokens.access_token

    # 2. A tool, and a task.
    echo = await session.call_tool("echo", {"text": "hello"})
    assert not echo.isError and echo.content[0].text == "hello", f"echo: {echo}"
    created = await session.experimental.call_tool_as_task(
        "generate_report", {"topic": "oauth", "sections": 1}
    )
    task_id = created.task.taskId

    # 3. The token runs out (by the client's clock: the issuer said 2 s); the next
    # request refreshes it, and the refreshed token reaches the same task.
    deadline = time.monotonic() + 10
    while provider.context.is_token_valid():
        assert time.monotonic() < deadline, "the token never expired"
        await anyio.sleep(0.1)
    status = await session.experimental.get_task(task_id)
    assert storage.tokens.access_token != first_token, "no new token"
    assert browser.logins == 1, "a new authorization instead of a refresh"
    assert status.taskId == task_id, f"tasks/get after the refresh: {status}"
    async for status in session.experimental.poll_task(task_id):
        pass
    assert status.status == "completed", f"task ended {status.status}: {status.statusMessage}"
    report = await session.experimental.get_task_result(task_id, CallToolResult)
    assert report.structuredContent["topic"] == "oauth", f"task result: {report}"

    # 4. The tool that needs deploy:write. Step-up: 403 insufficient_scope, a new
    # authorization with that scope, the call goes through. With dynamic registration
    # every scope was asked for up front (the server lists them all: a provider binds a
    # registered client to the scopes it registered with, so a step-up beyond them
    # would be refused there), and the call goes through at once.
    guarded = await session.call_tool("guarded", {})
    expected = 1 if dynamic else 2
    assert browser.logins == expected, f"{browser.logins} authorizations, not {expected}"
    assert "deploy:write" in scopes(storage), f"granted {scopes(storage)}"
    assert not guarded.isError and guarded.content[0].text == "deployed", f"guarded: {guarded}"


def key_id(token: str) -> str:
    """The `kid` of a JWT's header."""
    header = token.split(".")[0]
    return json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))["kid"]


async def rotation(session, storage, provider, issuer: Issuer) -> None:
    """5. The provider signs with a fresh key; the next refreshed token carries it, and
    mcp-taskd, not knowing the key, fetches the key set again and accepts it."""
    before = key_id(storage.tokens.access_token)
    issuer.rotate()
    deadline = time.monotonic() + 10
    while provider.context.is_token_valid():
        assert time.monotonic() < deadline, "the token never expired"
        await anyio.sleep(0.1)
    echo = await session.call_tool("echo", {"text": "rotated"})
    assert key_id(storage.tokens.access_token) != before, "the refreshed token has the old key"
    assert not echo.isError and echo.content[0].text == "rotated", f"echo: {echo}"


async def introspection(url: str, issuer: Issuer) -> None:
    """6. An opaque access token for our URL (the provider makes one for a resource
    indicator ending in `?format=opaque`), got by the code flow as a host would, is
    checked by introspection at the provider; one it never issued is refused."""
    async with httpx.AsyncClient() as http:
        registered = await http.post(f"{issuer.url}/reg", json={
            "redirect_uris": [REDIRECT_URI], "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code"], "client_name": NAME})
        client_id = registered.json()["client_id"]
        verifier = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
        challenge = base64.urlsafe_b64encode(
            hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        browser = ScriptedBrowser()
        await browser.open(f"{issuer.url}/auth?" + urlencode({
            "response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT_URI,
            "scope": "mcp:use", "state": "opaque", "code_challenge": challenge,
            "code_challenge_method": "S256", "resource": f"{url}?format=opaque"}))
        code, _ = await browser.callback()
        answer = await http.post(f"{issuer.url}/token", data={
            "grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT_URI,
            "client_id": client_id, "code_verifier": verifier,
            "resource": f"{url}?format=opaque"})
        assert answer.status_code == 200, f"token: {answer.text}"
        opaque = answer.json()["access_token"]
        assert opaque.count(".") != 2, "not an opaque token"
        for token, status in [(opaque, 200), ("never-issued-" + opaque, 401)]:
            listed = await http.post(
                url,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {}}}},
                headers={"Authorization": f"Bearer {token}",
                         "Accept": "application/json, text/event-stream",
                         "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
            )
            assert listed.status_code == status, (
                f"opaque token: HTTP {listed.status_code}, not {status}: {listed.text[:200]}")


def main(name: str = NAME, script: str = "MCP_TASKD_IDP", dynamic: bool = False) -> int:
    """Runs the flow with the authorization server whose script the environment names
    in `script`. `dynamic`: the SDK registers its client, and the server's
    `scopes_supported` lists every scope (else the client is registered beforehand and
    `scopes_supported` names the basic scope only, so that the guarded tool steps up)."""
    verdict = f"PASS {name}"
    with tempfile.TemporaryDirectory(prefix="mcp-taskd-oauth-") as work:
        issuer = Issuer(os.environ[script])
        server = None
        try:
            scopes_supported = ["mcp:use", "deploy:write"] if dynamic else ["mcp:use"]
            server, url = start_server(
                sys.argv[1], Path(work), issuer.url, scopes_supported, introspection=dynamic
            )
            anyio.run(flow, url, dynamic, issuer)
        except BaseException as error:  # a timeout, an assertion, or the SDK's own error group
            verdict = f"FAIL {name}: {describe(error)}"
        finally:
            if server:
                server.terminate()
                try:
                    server.wait(5)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()
            issuer.stop()
    print(verdict)
    return 0 if verdict.startswith("PASS") else 1


def describe(error: BaseException) -> str:
    """The innermost cause, on one line: SDK failures arrive wrapped in exception groups."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}".replace("\n", " ")[:300]


if __name__ == "__main__":
    sys.exit(main())
