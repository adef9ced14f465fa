"""`GET` and `DELETE /v1/responses/{id}`: a stored response (404 if not stored)."""

from __future__ import annotations

from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from specli.serve import errors
from specli.serve.protocols.openai_responses.store import ResponseStore
from specli.serve.served import authorize, served_of


def deleted_reply(rid: str) -> dict[str, object]:
    return {"id": rid, "object": "response.deleted", "deleted": True}


def store_routes(store: ResponseStore) -> list[Route]:
    async def stored_response(request: HttpRequest) -> Response:
        """GET and DELETE /v1/responses/{id}: a stored response (404 if not stored)."""
        authorize(request, served_of(request).config.api_key)
        rid = request.path_params["rid"]
        if request.method == "DELETE":
            if not store.delete(rid):
                raise errors.not_found(f"no stored response {rid!r}")
            return JSONResponse(deleted_reply(rid))
        stored = store.get(rid)
        if stored is None:
            raise errors.not_found(f"no stored response {rid!r} (never stored with store: true, deleted, or dropped "
                                   "as the oldest)")
        return JSONResponse(stored.response)

    return [Route("/v1/responses/{rid}", stored_response, methods=["GET", "DELETE"])]
