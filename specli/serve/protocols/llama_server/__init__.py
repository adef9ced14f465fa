"""llama-server's own API: `POST /infill` (fill in the middle, for editor plugins: bodies
in `request`, answers in `reply`) and the helper routes tools call beside generation
(`/tokenize`, `/detokenize`, `/apply-template`, `/props`, `/slots`: `routes`)."""

from specli.serve.protocols.base import WireProtocol
from specli.serve.protocols.llama_server.reply import events, whole
from specli.serve.protocols.llama_server.request import parse_infill
from specli.serve.protocols.llama_server.routes import ROUTES

INFILL = WireProtocol("infill", "infill-", "/infill", parse_infill, whole, events)

__all__ = ["INFILL", "ROUTES"]
