"""What a model's chat template puts around a user message and after a reply: the frame every
prompt is read in, and the marker that ends a reply (``hierarchy.end_of_text``). Rendered by a
local judge's tokenizer; a server judge asks its server (:mod:`hdeval.llm.server.likelihood`)."""

from __future__ import annotations

from typing import Any

#: Stands for the message while a template is rendered (invisible separators around a name).
PLACEHOLDER = "\u2063HDEVAL_MESSAGE\u2063"


def frame(tokenizer: Any) -> tuple[str, str]:
    """Text before and after a user message, the reply's opening included; ("", "") where the
    tokenizer has no chat template."""
    if tokenizer.chat_template is None:
        return "", ""
    message = [{"role": "user", "content": PLACEHOLDER}]
    rendered = tokenizer.apply_chat_template(message, tokenize=False, add_generation_prompt=True)
    head, tail = rendered.split(PLACEHOLDER)
    return head, tail


def end_of_reply(tokenizer: Any) -> str:
    """The marker the chat template ends a reply with (``<|im_end|>``); "" without one."""
    if tokenizer.chat_template is None:
        return ""
    messages = [{"role": "user", "content": "?"}, {"role": "assistant", "content": PLACEHOLDER}]
    return reply_end(tokenizer.apply_chat_template(messages, tokenize=False).split(PLACEHOLDER)[-1])


def reply_end(after_reply: str) -> str:
    """The end-of-reply marker in what a chat template puts after an assistant reply: its first
    line (Qwen's ``<|im_end|>``, Llama 3's ``<|eot_id|>``); "" where it puts nothing."""
    lines = after_reply.splitlines()
    return lines[0].strip() if lines else ""
