"""Measurements beyond `specli bench`, run from the repository root as modules
(`python -m benchmarks.serve --help`) or as shell scripts. None is a test: they measure
and assert nothing. What they share with the tests (server processes, HTTP requests,
memory readings, the edit workload, the agent proxies) lives in harness/.

Modules, one line each (tests/test_repo_layout.py checks that every module is here):

- agents: real coding agents (Claude Code, opencode, Codex) against specli serve and llama-server.
- clients: N clients at once against specli serve's slots and llama-server's.
- features_cost: what reading the target's hidden states beside its logits costs.
- followup_turn: auto against plain decoding on a chat's follow-up turn (issue 64).
- heads_acceptance: held-out agreement of sets of learned heads with their target.
- heads_online: what serve --heads-learn does for traffic the heads were not trained on.
- heads_speed: learned drafters' decode speed beside plain decoding on one target.
- heads_transfer: whether heads trained on one quantization serve another of the same weights.
- history_draft_share: drafting's share of decode time with a full history store.
- history_scale: the suffix history store at 10 M tokens (build, save, load, lookups).
- llama_routes: /tokenize, /detokenize, /apply-template, /props against llama-server's.
- long_session: memory and speed over many chat turns and generations.
- poisoned_start: auto after a calibration taken on a busy machine.
- profile_step: specli's own work per target forward and the functions it goes to.
- prompt_cache: restoring a conversation from the prompt cache against prefilling it.
- prompt_cache_memory: the prompt cache's RAM and disk bounds under churn.
- record_agents: records what coding agents send (tests/fixtures/agents).
- record_fim_prompts: records the prompts llama-server's /infill builds (tests/fixtures/fim).
- rpc_memory: memory of an RPC client and its two servers over many generations.
- serve: specli serve against llama-server over HTTP on the edit and fresh workloads.
- serve_memory: a specli serve process's memory over 200 requests.
- serve_overhead: what the server adds to the engine (decode speed, time to first token).
- structured: JSON-schema tool calls over HTTP, specli's modes against llama-server's.
- trace: replays an agent trace (traces/agent.jsonl) against specli serve and llama-server.
- web_page: the chat page under a long streamed answer (frame gaps, long tasks).

Shell scripts:

- any_model.sh: targets of other families, and a draft model of another vocabulary.
- bench-vs-llama-cpp.sh: the README's performance tables, beside llama.cpp's own speculation.
- bench_rpc.sh: the target on RPC servers over a simulated network.
- bench_warm_categories.sh: a history store full of unrelated text must not cost.
"""
