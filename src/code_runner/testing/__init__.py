"""Deterministic fakes shipped with code-runner, for its own tests and for yours.

`scripted_server.ScriptedServer` is a real HTTP server on 127.0.0.1 that answers model API
requests from a script of turns, one module per wire protocol (`chat_completions` now;
the Responses and Anthropic Messages APIs plug in the same way). Tests drive the real SDKs
and agent CLIs against it instead of mocking them.
"""
