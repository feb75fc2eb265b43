"""The listener: a second maitred on a port already served is refused
(SO_REUSEPORT would otherwise let it take half of the app's connections)."""

from harness import MaitredTest, maitred_only, pb, CALL_LIMIT


class Listen(MaitredTest):
    @maitred_only
    def test_second_instance_on_same_port_is_refused(self):
        up = self.start_upstream("alpha")
        cfg = self.config([self.service("*", [up])], workers=2)
        first = self.start_maitred(cfg)
        path = self.write_config(cfg, "second.yaml")
        rc, out, err = self.run_maitred(["--config", path])
        self.assertEqual(rc, 1, err)
        self.assertIn("cannot listen on %s: Address already in use" % cfg["listen"], err)
        # The first one is untouched and still serves every call.
        stub = self.echo(first)
        for _ in range(20):
            self.assertEqual(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "alpha")
        self.stop_maitred(first)
