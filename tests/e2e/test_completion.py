"""`dtlaunch completion bash|zsh|man`: the completion a user's shell loads and the man page, checked
against the binary's own --help so that they cannot drift from its flags."""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from common import DTLAUNCH, main


def generated(kind):
    out = subprocess.run([DTLAUNCH, "completion", kind], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def help_spellings():
    """The option spellings --help lists at the start of its option lines ("  -r,--redirects TEXT ...")."""
    text = subprocess.run([DTLAUNCH, "--help"], capture_output=True, text=True, timeout=30).stdout
    spellings = set()
    for line in text.splitlines():
        m = re.match(r"^\s+(-[\w-]+(?:,-[\w-]+)*)", line)
        if m:
            spellings.update(m.group(1).split(","))
    assert "--nproc_per_node" in spellings and "-r" in spellings, text
    return spellings


class BashCompletionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="dtl_completion_")
        cls.script = os.path.join(cls.tmp.name, "dtlaunch.bash")
        with open(cls.script, "w") as f:
            f.write(generated("bash"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def complete(self, line, cwd=None):
        """What <TAB> offers at the end of `line` (a non-interactive bash, as the completion runs), in
        an empty folder unless `cwd` is given (paths are offered where the program's name is)."""
        cwd = cwd or self.tmp.name
        words = line.split(" ")
        script = (f"source {self.script}\n"
                  f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
                  "_dtlaunch; printf '%s\\n' \"${COMPREPLY[@]}\"")
        out = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True, text=True,
                             timeout=30, cwd=cwd)
        self.assertEqual(out.returncode, 0, out.stderr)
        return sorted(w for w in out.stdout.split("\n") if w)

    def test_it_registers_for_dtlaunch(self):
        out = subprocess.run(["bash", "--norc", "-c", f"source {self.script}; complete -p dtlaunch"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.stdout.strip(), "complete -o filenames -F _dtlaunch dtlaunch")

    def test_a_flag_prefix_completes_to_the_flag(self):
        self.assertEqual(self.complete("dtlaunch --nproc_"), ["--nproc_per_node"])
        self.assertEqual(self.complete("dtlaunch --nproc-"), ["--nproc-per-node"])

    def test_the_values_of_nproc_per_node_and_the_other_word_valued_flags(self):
        self.assertEqual(self.complete("dtlaunch --nproc_per_node "), ["auto", "cpu", "gpu"])
        self.assertEqual(self.complete("dtlaunch --nproc-per-node = g"), ["gpu"])  # --nproc-per-node=g
        self.assertEqual(self.complete("dtlaunch --rdzv_backend "), ["c10d", "static"])
        self.assertEqual(self.complete("dtlaunch --mixed_precision b"), ["bf16"])
        self.assertEqual(self.complete("dtlaunch --gpu_visibility "), ["all", "per_worker"])

    def test_file_names_after_config_file_and_after_the_program(self):
        with tempfile.TemporaryDirectory() as d:
            for name in ["acc.yaml", "train.py"]:
                open(os.path.join(d, name), "w").close()
            self.assertEqual(self.complete("dtlaunch --config_file a", cwd=d), ["acc.yaml"])
            self.assertEqual(self.complete("dtlaunch --nproc_per_node 2 t", cwd=d), ["train.py"])
            # past the program its own arguments: no dtlaunch flags
            self.assertEqual(self.complete("dtlaunch train.py --nproc_", cwd=d), [])

    def test_subcommands_and_their_words(self):
        self.assertEqual(self.complete("dtlaunch con"), ["config"])
        self.assertEqual(self.complete("dtlaunch config "), ["default", "show", "validate"])
        self.assertEqual(self.complete("dtlaunch completion "), ["bash", "man", "zsh"])

    def test_after_launch_dtlaunch_s_own_flags_complete_again(self):
        self.assertEqual(self.complete("dtlaunch la"), ["launch"])
        self.assertEqual(self.complete("dtlaunch launch --nproc_"), ["--nproc_per_node"])
        self.assertEqual(self.complete("dtlaunch launch --mixed_precision b"), ["bf16"])

    def test_paths_after_a_subcommand_s_own_word(self):
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "cfg.yaml"), "w").close()
            self.assertEqual(self.complete("dtlaunch config validate c", cwd=d), ["cfg.yaml"])
            self.assertEqual(self.complete("dtlaunch config --config_file c", cwd=d), ["cfg.yaml"])

    def test_every_flag_of_help_is_offered(self):
        offered = set(self.complete("dtlaunch -"))
        self.assertEqual(help_spellings() - offered, set())


class ZshAndManTest(unittest.TestCase):
    def test_zsh_completion_has_every_flag_and_parses(self):
        text = generated("zsh")
        self.assertTrue(text.startswith("#compdef dtlaunch\n"))
        self.assertEqual({s for s in help_spellings() if s not in text}, set())
        if not shutil.which("zsh"):
            self.skipTest("zsh is not installed: its syntax check did not run")
        out = subprocess.run(["zsh", "-n", "-c", text], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)

    def test_the_man_page_documents_every_flag_and_renders_without_warnings(self):
        page = generated("man")
        self.assertTrue(page.startswith(".TH DTLAUNCH 1 "))
        self.assertEqual({s for s in help_spellings() if s.replace("-", "\\-") not in page}, set())
        if not shutil.which("groff"):
            self.skipTest("groff is not installed: the page was not rendered")
        out = subprocess.run(["groff", "-man", "-ww", "-z"], input=page, capture_output=True, text=True, timeout=30)
        self.assertEqual((out.returncode, out.stderr), (0, ""))

    def test_an_unknown_kind_is_one_line_and_exit_2(self):
        out = subprocess.run([DTLAUNCH, "completion", "fish"], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 2)
        self.assertEqual(out.stderr, "dtlaunch completion: error: expected one of bash, zsh, man (got 'fish')\n")

    def test_zsh_offers_a_subcommand_s_words(self):
        text = generated("zsh")
        self.assertIn("config) (( CURRENT == 2 )) && compadd default show validate || _files ;;", text)
        self.assertIn("completion) (( CURRENT == 2 )) && compadd bash zsh man || _files ;;", text)


if __name__ == "__main__":
    main()
