"""Jupyter protocol conformance of the moelens kernel (jupyter_kernel_test), plus interrupts.

Run with Debian's Python, against a kernelspec found through JUPYTER_PATH:
    JUPYTER_PATH=<prefix>/share/jupyter /usr/bin/python3 test/kernel/test_conformance.py
"""
import os
import sys
import time
import unittest

import jupyter_kernel_test as jkt
from jupyter_client.utils import run_sync


class MoelensKernelTests(jkt.KernelTests):
    kernel_name = os.environ.get("MOELENS_KERNEL_NAME", "moelens")
    language_name = "typescript"
    file_extension = ".ts"

    code_hello_world = 'console.log("hello, world")'
    code_stderr = 'console.error("oops")'
    code_generate_error = 'throw new Error("boom")'
    code_execute_result = [
        {"code": "1 + 2 + 3", "result": "6"},
        {"code": "const word: string = 'ab' + 'c';\nword", "result": "'abc'"},
        {"code": "[1, 2].map((x) => x * 10)", "result": "[ 10, 20 ]"},
        {"code": "await Promise.resolve(42)", "result": "42"},
    ]
    code_display_data = [
        {"code": 'display({ toMimeBundle: () => ({ "text/html": "<b>hi</b>" }) })', "mime": "text/html"},
        {
            "code": 'display({ toMimeBundle: () => ({ "application/vnd.plotly.v1+json": { data: [] }, "text/html": "<div></div>" }) })',
            "mime": "application/vnd.plotly.v1+json",
        },
    ]
    code_clear_output = "clearOutput()"
    code_inspect_sample = "Math.max"
    completion_samples = [
        {"text": "const zzzAlpha = 1, zzzBeta = 2;\nzzz", "matches": {"zzzAlpha", "zzzBeta"}},
        {"text": "Math.ma", "matches": {"max"}},
    ]
    complete_code_samples = ["1 + 1", "const x = 1", "function f() { return 1 }", "for await (const x of g()) {}"]
    incomplete_code_samples = ["function f() {", "const x = (1 +", "`abc", "/* comment"]
    invalid_code_samples = ["1 +* 2", "const = 5", "let let let"]
    supported_history_operations = ("tail", "range", "search")
    code_history_pattern = "1 + 2*"

    # --- beyond jupyter_kernel_test: what a notebook relies on ---------------------------------

    def execute(self, code, timeout=30):
        """Runs code; returns (reply, [iopub messages of this request])."""
        self.flush_channels()
        msg_id = self.kc.execute(code)
        reply = self.get_non_kernel_info_reply(timeout=timeout)
        self.assertEqual(reply["parent_header"]["msg_id"], msg_id)
        outputs = []
        while True:
            msg = run_sync(self.kc.iopub_channel.get_msg)(timeout=5)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return reply, outputs
            outputs.append(msg)

    def test_declarations_persist_across_cells(self):
        self.execute("const a = 40; let b = 1; function add(x: number) { return x + a }\nclass Box { v = 2 }")
        reply, outputs = self.execute("b += 1; add(b) + new Box().v")
        self.assertEqual(reply["content"]["status"], "ok")
        results = [m for m in outputs if m["msg_type"] == "execute_result"]
        self.assertEqual(results[0]["content"]["data"]["text/plain"], "44")
        # Running a declaring cell again redeclares, as editing a notebook does.
        reply, _ = self.execute("const a = 1;")
        self.assertEqual(reply["content"]["status"], "ok")

    def test_top_level_for_await(self):
        code = "async function* gen() { yield 1; yield 2; }\nlet sum = 0;\nfor await (const x of gen()) sum += x;\nsum"
        reply, outputs = self.execute(code)
        self.assertEqual(reply["content"]["status"], "ok", reply["content"])
        results = [m["content"]["data"]["text/plain"] for m in outputs if m["msg_type"] == "execute_result"]
        self.assertEqual(results, ["3"])

    def test_error_reply_and_next_cell_runs(self):
        reply, outputs = self.execute("function fail() { throw new TypeError('bad input') }\nfail()")
        self.assertEqual(reply["content"]["status"], "error")
        self.assertEqual(reply["content"]["ename"], "TypeError")
        self.assertEqual(reply["content"]["evalue"], "bad input")
        errors = [m for m in outputs if m["msg_type"] == "error"]
        self.assertEqual(len(errors), 1)
        trace = "\n".join(errors[0]["content"]["traceback"])
        self.assertRegex(trace, r"at fail \(cell\[\d+\]:1:25\)", trace)  # the TypeScript line and column
        reply, _ = self.execute("'still alive'")
        self.assertEqual(reply["content"]["status"], "ok")

    def test_type_errors_are_reported_but_do_not_block(self):
        reply, outputs = self.execute("const n: number = 'text' as any as string;\n'ran'")
        self.assertEqual(reply["content"]["status"], "ok")
        stderr = "".join(m["content"]["text"] for m in outputs if m["msg_type"] == "stream" and m["content"]["name"] == "stderr")
        self.assertIn("TS2322", stderr)
        self.assertTrue(any(m["msg_type"] == "execute_result" for m in outputs))

    def test_update_display(self):
        code = (
            "display('v0', { displayId: 'counter' });\n"
            "for (let i = 1; i <= 1000; i++) updateDisplay(`v${i}`, { displayId: 'counter' });"
        )
        reply, outputs = self.execute(code)
        self.assertEqual(reply["content"]["status"], "ok")
        updates = [m for m in outputs if m["msg_type"] == "update_display_data"]
        self.assertGreaterEqual(len(updates), 1)
        self.assertEqual(updates[-1]["content"]["data"]["text/plain"], "'v1000'")
        self.assertEqual(updates[-1]["content"]["transient"]["display_id"], "counter")

    def test_many_lines_are_coalesced_in_order(self):
        reply, outputs = self.execute("for (let i = 0; i < 10000; i++) console.log(i)")
        self.assertEqual(reply["content"]["status"], "ok")
        text = "".join(m["content"]["text"] for m in outputs if m["msg_type"] == "stream")
        self.assertEqual(text, "".join(f"{i}\n" for i in range(10000)))
        self.assertLess(len(outputs), 50)

    def interrupt_message(self):
        msg = self.kc.session.msg("interrupt_request", {})
        self.kc.control_channel.send(msg)
        reply = run_sync(self.kc.control_channel.get_msg)(timeout=10)
        self.assertEqual(reply["msg_type"], "interrupt_reply")
        self.assertEqual(reply["content"]["status"], "ok")

    def check_interrupt(self, code, interrupt):
        self.flush_channels()
        msg_id = self.kc.execute(code)
        while True:  # the cell has started once its input is echoed; give it a moment to get busy
            msg = run_sync(self.kc.iopub_channel.get_msg)(timeout=10)
            if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "execute_input":
                break
        time.sleep(0.5)
        interrupt()
        reply = self.get_non_kernel_info_reply(timeout=10)
        self.assertEqual(reply["parent_header"]["msg_id"], msg_id)
        self.assertEqual(reply["content"]["status"], "error")
        self.assertEqual(reply["content"]["ename"], "KernelInterrupt")
        reply, _ = self.execute("'after the interrupt'")
        self.assertEqual(reply["content"]["status"], "ok")

    def test_interrupt_by_message_abandons_an_await(self):
        self.check_interrupt("await new Promise(() => {})", self.interrupt_message)

    def test_interrupt_by_signal_stops_a_busy_loop(self):
        self.check_interrupt("while (true) {}", self.km.interrupt_kernel)

    def test_interrupt_hooks_run(self):
        self.execute("let cancelled = false; onInterrupt(() => { cancelled = true; });")
        self.check_interrupt("await new Promise(() => {})", self.km.interrupt_kernel)
        _, outputs = self.execute("cancelled")
        results = [m["content"]["data"]["text/plain"] for m in outputs if m["msg_type"] == "execute_result"]
        self.assertEqual(results, ["true"])

    def test_imports_resolve_the_package_and_node_modules(self):
        code = 'import { load } from "moelens";\nimport * as path from "node:path";\n[typeof load, path.sep]'
        reply, outputs = self.execute(code)
        self.assertEqual(reply["content"]["status"], "ok", reply["content"])
        results = [m["content"]["data"]["text/plain"] for m in outputs if m["msg_type"] == "execute_result"]
        self.assertEqual(results, ["[ 'function', '/' ]"])

    def test_dynamic_import_of_the_package_and_node_modules_prints_no_warning(self):
        code = (
            'const sdk = await import("moelens");\n'
            'const { load } = await import("moelens");\n'
            'const os = await import("node:os");\n'
            '[typeof sdk.load, load === sdk.load, typeof os.cpus]'
        )
        reply, outputs = self.execute(code)
        self.assertEqual(reply["content"]["status"], "ok", reply["content"])
        results = [m["content"]["data"]["text/plain"] for m in outputs if m["msg_type"] == "execute_result"]
        self.assertEqual(results, ["[ 'function', true, 'function' ]"])
        streams = "".join(m["content"]["text"] for m in outputs if m["msg_type"] == "stream")
        self.assertEqual(streams, "")

    def test_process_exit_is_refused_and_the_kernel_lives_on(self):
        self.execute("const alive = 'still here';")
        reply, outputs = self.execute("process.exit(0)")
        self.assertEqual(reply["content"]["status"], "error")
        self.assertEqual(reply["content"]["ename"], "ProcessExitRefused")
        self.assertIn("would end the kernel", reply["content"]["evalue"])
        reply, outputs = self.execute("alive")
        self.assertEqual(reply["content"]["status"], "ok", reply["content"])
        results = [m["content"]["data"]["text/plain"] for m in outputs if m["msg_type"] == "execute_result"]
        self.assertEqual(results, ["'still here'"])

    def test_tslab_notebooks_run_unchanged(self):
        code = (
            'import * as tslab from "tslab";\n'
            'tslab.display.html("<b>bold</b>");\n'
            'tslab.display.markdown("*md*");\n'
            'tslab.display.png(new Uint8Array([137, 80, 78, 71]));'
        )
        reply, outputs = self.execute(code)
        self.assertEqual(reply["content"]["status"], "ok", reply["content"])
        shown = [m["content"]["data"] for m in outputs if m["msg_type"] == "display_data"]
        self.assertEqual([d.get("text/html") for d in shown], ["<b>bold</b>", None, None])
        self.assertEqual(shown[1]["text/markdown"], "*md*")
        self.assertEqual(shown[2]["image/png"], "iVBORw==")


if __name__ == "__main__":
    unittest.main(verbosity=2)
