"""``driftwarden tokens create|list|revoke|rotate-link-key``: scoped API tokens and the key of the signed
report links. Module-level imports stay light (typer)."""

from __future__ import annotations

from typing import Annotated

import typer

from core.auth import SCOPES_LISTED
from core.cli_options import JsonOut, write_json
from core.durations import parse_duration
from core.terminal import make_console

tokens_app = typer.Typer(
    help=f"Scoped bearer tokens for the API ({SCOPES_LISTED}): create, list, revoke; and the key of the "
    "signed report links (rotate-link-key).",
    no_args_is_help=True,
)


@tokens_app.command("create")
def create(
    name: Annotated[str, typer.Option("--name", help="Who or what uses the token (e.g. 'ci', 'labeler').")],
    scope: Annotated[
        list[str],
        typer.Option("--scope", help=f"{SCOPES_LISTED} (repeat for more; admin implies every other)."),
    ],
    expires_in: Annotated[
        str,
        typer.Option("--expires-in", help="Lifetime: 30m, 12h, 90d, 2w, 1d12h (at most 3650d), or never."),
    ] = "90d",
) -> None:
    """Create a token and print its secret once (only its SHA-256 is stored: it cannot be shown again)."""
    from access.service import create_token
    from core.database import open_database

    lifetime = parse_duration(expires_in, where="--expires-in", allow_never=True)
    db = open_database()
    try:
        with db.session() as session:
            made = create_token(session=session, name=name, scopes=scope, expires_in=lifetime)
            token_id, expires = made.row.id, made.row.expires_at
    finally:
        db.dispose()
    console = make_console(stderr=True)
    console.print(
        f"token [bold]{token_id}[/bold] ({name}; scopes {', '.join(sorted(set(scope)))}; "
        f"expires {expires.isoformat(timespec='seconds') if expires else 'never'}). "
        "Store the secret now: it is not shown again."
    )
    typer.echo(made.secret)  # alone on stdout: TOKEN=$(driftwarden tokens create ...)


@tokens_app.command("list")
def list_(
    as_json: JsonOut = None,
) -> None:
    """Every token with its scopes, expiry and state (never a secret)."""

    from access.models import TokenRead
    from access.service import list_tokens
    from core.database import open_database, utcnow

    db = open_database()
    try:
        with db.session() as session:
            now = utcnow()
            rows = [TokenRead.of(r, now=now) for r in list_tokens(session=session)]
    finally:
        db.dispose()
    if as_json is not None:
        write_json([r.model_dump(mode="json") for r in rows], to=as_json)
        return
    from rich.table import Table

    table = Table("id", "name", "scopes", "created", "expires", "state")
    for r in rows:
        table.add_row(
            r.id,
            r.name,
            ",".join(r.scopes),
            r.created_at.strftime("%Y-%m-%d %H:%M"),
            r.expires_at.strftime("%Y-%m-%d %H:%M") if r.expires_at else "never",
            r.state,
        )
    make_console().print(table)


@tokens_app.command("revoke")
def revoke(
    token_id: Annotated[
        str, typer.Argument(help="The token's id (`tokens list`), or the whole token dw_<id>_<secret>.")
    ],
) -> None:
    """Revoke a token: a running server refuses it within token_cache_s seconds."""
    from access.service import revoke_token
    from core.auth import TOKEN_PREFIX, token_id_of
    from core.database import open_database
    from core.errors import Invalid

    if token_id.startswith(TOKEN_PREFIX):  # a whole token: its id, and the secret never shown again
        found = token_id_of(token_id)
        if found is None:
            raise Invalid("token: not a token of the shape dw_<id>_<secret>, nor a token id (`tokens list`)")
        token_id = found
    db = open_database()
    try:
        with db.session() as session:
            revoke_token(session=session, token_id=token_id)
    finally:
        db.dispose()
    typer.echo(f"revoked {token_id}")


@tokens_app.command("rotate-link-key")
def rotate_link_key_cmd() -> None:
    """Replace the database's key of signed report links: every link made before stops working (a running
    server within token_cache_s seconds). With DRIFTWARDEN_LINK_SIGNING_KEY set, servers use that key
    instead: change it and restart them."""
    from access.service import rotate_link_key
    from core.config import get_settings
    from core.database import open_database

    db = open_database()
    try:
        with db.session() as session:
            rotate_link_key(session=session)
    finally:
        db.dispose()
    typer.echo("rotated the link key in the database: links signed before no longer open")
    if get_settings().link_signing_key is not None:
        make_console(stderr=True).print(
            "note: DRIFTWARDEN_LINK_SIGNING_KEY is set here; processes with it set sign and verify links "
            "with that key, not the database's: change the variable and restart them to invalidate their "
            "links"
        )


def register(app: typer.Typer) -> None:
    """Add ``tokens ...`` to the root CLI."""
    app.add_typer(tokens_app, name="tokens")
