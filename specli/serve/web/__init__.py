"""The chat page `specli serve` opens at `/`: static files shipped in the package (no build
step, nothing fetched from elsewhere at run time), served without the API key, which the
page asks for and sends on the routes that need it. Its libraries are in static/vendor/
(scripts/vendor-web.sh); what it shows of speculation comes from `specli.sources`."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request as HttpRequest
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"
# the page is small and changes with the package: a browser checks it again on each load
NO_STALE = {"cache-control": "no-cache"}


async def page(request: HttpRequest) -> Response:
    """GET /: the chat page."""
    return FileResponse(STATIC / "index.html", headers=NO_STALE)


ROUTES = [
    Route("/", page, methods=["GET"]),
    Mount("/web", StaticFiles(directory=STATIC), name="web"),
]
