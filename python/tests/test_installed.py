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
        """The distribution's version is the package's (pyproject.toml reads
        it from ratelimitd.__version__)."""
        from importlib.metadata import version
        self.assertEqual(version("ratelimitd"), ratelimitd.__version__)

    def test_exports(self):
        from ratelimitd import client
        self.assertEqual(ratelimitd.__all__, client.__all__)
        for name in ratelimitd.__all__:
            self.assertIs(getattr(ratelimitd, name), getattr(client, name))

    def test_stubs_are_nested(self):
        import sys
        self.assertTrue(envoy_rls.rls_pb2.__name__.startswith("ratelimitd.proto."))
        self.assertEqual(v1.ratelimit_pb2.ShouldRateLimitRequest.__module__,
                         "ratelimitd.proto.ratelimit.v1.ratelimit_pb2")
        tops = {"envoy", "validate", "udpa", "xds", "ratelimit"}
        self.assertEqual([m for m in sys.modules if m.split(".")[0] in tops], [])


if __name__ == "__main__":
    unittest.main()
