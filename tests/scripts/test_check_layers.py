"""scripts/check_layers.py: the repository passes, and a tree with an include up a layer, across to a
sibling, or from the trainer into the launcher fails, naming the file, the line and the rule."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "../../scripts/check_layers.py")


def run(root):
    return subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True, timeout=60)


class CheckLayers(unittest.TestCase):
    def tree(self, files):
        root = tempfile.mkdtemp(prefix="layers-")
        self.addCleanup(subprocess.run, ["rm", "-rf", root])
        for path, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        return root

    def test_the_repository_passes(self):
        r = run(os.path.join(HERE, "../.."))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("points down a layer", r.stdout)

    def test_includes_down_the_layers_pass(self):
        r = run(self.tree({
            "base/error.h": "",
            "watch/hang_watch.cc": '#include "watch/hang_watch.h"\n#include "node/proc_stat.h"\n#include "base/error.h"\n',
            "launcher/plan.cc": '#include "launcher/plan.h"\n#include "watch/hang_watch.h"\n#include <vector>\n',
        }))
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_an_include_up_a_layer_fails_naming_the_file_and_line(self):
        r = run(self.tree({"launcher/plan.cc": '#include "launcher/plan.h"\n#include "fanout/fanout.h"\n'}))
        self.assertEqual(r.returncode, 1)
        self.assertIn("launcher/plan.cc:2: includes fanout/fanout.h: fanout is a layer above launcher", r.stderr)

    def test_an_include_across_to_a_sibling_fails(self):
        r = run(self.tree({"config/flags.cc": '#include "rendezvous/auth.h"\n',
                           "agent/elastic_agent.cc": '#include "fanout/fanout_plan.h"\n'}))
        self.assertEqual(r.returncode, 1)
        self.assertIn("config/flags.cc:1: includes rendezvous/auth.h: rendezvous and config are siblings", r.stderr)
        self.assertIn("agent/elastic_agent.cc:1: includes fanout/fanout_plan.h: fanout and agent are siblings",
                      r.stderr)
        self.assertIn("2 include(s) break the layering", r.stderr)

    def test_the_trainer_includes_no_library_and_none_includes_it(self):
        r = run(self.tree({"apps/dtl-train/main.cc": '#include "apps/dtl-train/model.h"\n#include "base/error.h"\n',
                           "commands/env_command.cc": '#include "apps/dtl-train/model.h"\n'}))
        self.assertEqual(r.returncode, 1)
        self.assertIn("apps/dtl-train/main.cc:2: includes base/error.h: apps/dtl-train stands apart", r.stderr)
        self.assertIn("commands/env_command.cc:1: includes apps/dtl-train/model.h: apps/dtl-train stands apart",
                      r.stderr)


if __name__ == "__main__":
    unittest.main()
