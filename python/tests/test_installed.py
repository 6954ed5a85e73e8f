"""The package under test is the one users get."""

import os
import unittest

import ratelimitd
from ratelimitd import envoy_rls, v1


class InstalledTest(unittest.TestCase):
    @unittest.skipUnless(os.environ.get("RATELIMITD_TEST_INSTALLED"), "set by .ci/test-python")
    def test_not_the_source_tree(self):
        src = os.path.realpath(os.path.join(os.path.dirname(__file__), ".."))
        got = os.path.realpath(ratelimitd.__file__)
        self.assertFalse(got.startswith(src + os.sep), f"ratelimitd imported from the source tree: {got}")
        self.assertIn("site-packages", got)

    @unittest.skipUnless(os.environ.get("RATELIMITD_TEST_INSTALLED"), "set by .ci/test-python")
    def test_version(self):
        # The distribution's version is the package's (pyproject.toml reads
        # it from ratelimitd.__version__).
        from importlib.metadata import version
        self.assertEqual(version("ratelimitd"), ratelimitd.__version__)

    def test_exports(self):
        from ratelimitd import client
        self.assertEqual(ratelimitd.__all__, client.__all__)
        for name in ratelimitd.__all__:
            self.assertIs(getattr(ratelimitd, name), getattr(client, name))

    def test_client_registers_only_the_native_proto(self):
        # import ratelimitd (client, middleware, fakes) puts no Envoy, validate,
        # udpa or xds file into protobuf's process-wide pool, where another
        # distribution's differing copy would clash (python/README.md says
        # so); ratelimitd.envoy_rls does.
        import subprocess
        import sys
        prog = (
            "import ratelimitd, ratelimitd.asgi, ratelimitd.testing\n"
            "from google.protobuf import descriptor_pool\n"
            "pool = descriptor_pool.Default()\n"
            "pool.FindFileByName('ratelimit/v1/ratelimit.proto')\n"
            "def has(name):\n"
            "    try:\n"
            "        pool.FindFileByName(name)\n"
            "        return True\n"
            "    except KeyError:\n"
            "        return False\n"
            "files = ['validate/validate.proto', 'envoy/service/ratelimit/v3/rls.proto']\n"
            "print([has(f) for f in files])\n"
            "import ratelimitd.envoy_rls\n"
            "print([has(f) for f in files])\n")
        out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, check=True).stdout
        self.assertEqual(out.split("\n")[:2], ["[False, False]", "[True, True]"])

    def test_stubs_are_nested(self):
        import sys
        self.assertTrue(envoy_rls.rls_pb2.__name__.startswith("ratelimitd.proto."))
        self.assertEqual(v1.ratelimit_pb2.ShouldRateLimitRequest.__module__,
                         "ratelimitd.proto.ratelimit.v1.ratelimit_pb2")
        tops = {"envoy", "validate", "udpa", "xds", "ratelimit"}
        self.assertEqual([m for m in sys.modules if m.split(".")[0] in tops], [])


if __name__ == "__main__":
    unittest.main()
