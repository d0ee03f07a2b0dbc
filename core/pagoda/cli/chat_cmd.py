"""`pagoda chat [MODEL]`: a terminal chat that streams the reply as the engine generates it.

Interactive on a terminal (history kept across turns; /reset, /exit; Ctrl-C stops a reply), or one
message in and one reply out for scripts (``--message TEXT``, or the message on stdin).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Callable

from pagoda.cli.generate_cmd import add_sampling_args, build_llm, check_model, fail, sampling_kwargs
from pagoda.entrypoints.engine_args import DEFAULT_MODEL_HELP, add_engine_args, engine_config
from pagoda.plugins import get_plugin_manager

PROMPT = ">>> "
INTERRUPTED = "[interrupted]"
HELP_TEXT = "/exit or Ctrl-D quits, /reset clears the history, Ctrl-C stops a reply"

CHAT_EPILOG = f"""\
in the interactive chat: {HELP_TEXT}; /help repeats this.
An interrupted reply is dropped from the history together with its message.

examples:
  pagoda chat                                   # the embedded SmolLM2-135M-Instruct
  pagoda chat ./my-llama --system "Answer briefly." --temperature 0.7
  pagoda chat --message "Name three rivers." --temperature 0 --max-tokens 64
  echo "Name three rivers." | pagoda chat model.gguf

Flag errors exit with status 2 and a one-line reason before any model is loaded."""

Write = Callable[[str], None]


class ChatSession:
    """A conversation on one engine: renders the history with the chat template and streams replies."""

    def __init__(self, llm, params, system: str | None = None, chat_template: str | None = None) -> None:
        self.llm = llm
        self.engine = llm.engine
        self.params = params
        self.system = system
        self.chat_template = chat_template
        self.history: list[dict[str, str]] = []

    def messages(self) -> list[dict[str, str]]:
        system = [{"role": "system", "content": self.system}] if self.system else []
        return system + self.history

    def reset(self) -> None:
        self.history.clear()

    def send(self, text: str, write: Write) -> tuple[str, bool]:
        """Stream the reply to ``text`` through ``write``; returns (reply, completed).

        A reply stopped by Ctrl-C is aborted in the engine and, with its message, left out of the
        history. Raises ValueError (history unchanged) when the prompt does not fit the context.
        """
        self.history.append({"role": "user", "content": text})
        try:
            reply, completed = self._stream(write)
        except BaseException:
            self.history.pop()
            raise
        if completed:
            self.history.append({"role": "assistant", "content": reply})
        else:
            self.history.pop()
        return reply, completed

    def _stream(self, write: Write) -> tuple[str, bool]:
        prompt, ids = self.llm.render_chat(self.messages(), self.chat_template)
        request_id = self.engine.next_request_id()
        self.engine.add_request(request_id, ids, self.params, prompt=prompt, stream=True)
        parts: list[str] = []
        with DeferredInterrupt() as interrupt:
            while not interrupt.hit:
                for out in self.engine.step():
                    if out.request_id == request_id:
                        parts.append(out.outputs[0].text)
                        write(out.outputs[0].text)
                        if out.finished:
                            return "".join(parts), True
                if not self.engine.has_unfinished_requests():
                    break
        self.engine.abort(request_id)
        return "".join(parts), False


class DeferredInterrupt:
    """Turn Ctrl-C (SIGINT) into a flag checked between engine steps, so a step never stops halfway."""

    def __enter__(self) -> "DeferredInterrupt":
        self.hit = False
        self._previous = signal.signal(signal.SIGINT, self._on_signal)
        return self

    def _on_signal(self, signum, frame) -> None:
        self.hit = True

    def __exit__(self, *exc) -> None:
        signal.signal(signal.SIGINT, self._previous)


def add_parser(subparsers, parent: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "chat",
        parents=[parent],
        help="chat with a model in the terminal (streamed replies)",
        description="Chat with a model, using its tokenizer's chat template. On a terminal: an interactive "
                    "chat that keeps the history. With --message, or a message piped on stdin: print "
                    "the one reply and exit. MODEL is " + DEFAULT_MODEL_HELP + ".",
        epilog=CHAT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", nargs="?", metavar="MODEL", help="the model (default: the embedded one)")
    p.add_argument("--message", "-m", help="send this one message, print the reply and exit (no interactive chat)")
    p.add_argument("--system", help="a system prompt placed before the conversation")
    p.add_argument("--chat-template", metavar="FILE_OR_TEXT",
                   help="a Jinja chat template (a file path or the template text) instead of the tokenizer's")
    add_sampling_args(p, temperature=0.7, max_tokens=512)
    add_engine_args(p, get_plugin_manager())
    p.set_defaults(func=run)


def read_template(value: str | None) -> str | None:
    """--chat-template: a file's contents, or the text itself."""
    if value is None:
        return None
    path = Path(value).expanduser()
    return path.read_text() if path.is_file() else value


def one_shot_message(args: argparse.Namespace) -> str | None:
    """The message of a non-interactive run (--message, else stdin when it is not a terminal)."""
    if args.message is not None:
        return args.message.strip()
    if sys.stdin is not None and not sys.stdin.isatty():
        return sys.stdin.read().strip()
    return None


def run(args: argparse.Namespace) -> int:
    from pagoda.sampling_params import SamplingParams

    try:
        check_model(args.model)
        params = SamplingParams(**sampling_kwargs(args))
        config = engine_config(args, args.model)
        template = read_template(args.chat_template)
        message = one_shot_message(args)
        if message is not None and not message:
            raise ValueError("the message is empty")
    except (ValueError, OSError) as exc:
        return fail("chat", exc)
    llm = build_llm(config, "chat")
    if isinstance(llm, int):
        return llm
    if template is None and not getattr(llm.get_tokenizer(), "chat_template", None):
        return fail("chat", ValueError("this model's tokenizer has no chat template; pass --chat-template FILE_OR_TEXT"))
    session = ChatSession(llm, params, system=args.system, chat_template=template)
    if message is not None:
        return reply_once(session, message)
    return repl(session, model_name=args.model or "the default model")


def write_stdout(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def reply_once(session: ChatSession, message: str) -> int:
    """Print one streamed reply; status 130 when interrupted, 2 when the message does not fit."""
    try:
        _, completed = session.send(message, write_stdout)
    except ValueError as exc:
        return fail("chat", exc)
    write_stdout("\n")
    return 0 if completed else 130


def repl(session: ChatSession, model_name: str) -> int:
    """The interactive loop: read a line, run a command or stream a reply, until /exit or EOF."""
    _enable_line_editing()
    print(f"Chatting with {os.path.basename(model_name.rstrip('/')) or model_name}. {HELP_TEXT}.")
    while True:
        try:
            line = input(PROMPT).strip()
        except EOFError:
            print()
            return 0
        except KeyboardInterrupt:
            print("\n(use /exit or Ctrl-D to quit)")
            continue
        if not line:
            continue
        if line.startswith("/") and handle_command(session, line):
            return 0
        if not line.startswith("/"):
            _turn(session, line)


def handle_command(session: ChatSession, line: str) -> bool:
    """Run a /command; True means quit."""
    command = line.split()[0].lower()
    if command in ("/exit", "/quit", "/bye"):
        return True
    if command == "/reset":
        session.reset()
        print("(history cleared)")
    elif command == "/help":
        print(HELP_TEXT)
    else:
        print(f"unknown command {command}; {HELP_TEXT}")
    return False


def _turn(session: ChatSession, line: str) -> None:
    try:
        _, completed = session.send(line, write_stdout)
    except ValueError as exc:
        print(f"error: {exc} (/reset starts a new conversation)")
        return
    print("" if completed else f" {INTERRUPTED}")


def _enable_line_editing() -> None:
    try:
        import readline  # noqa: F401  (arrow keys and history in input())
    except ImportError:
        pass
