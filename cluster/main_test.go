package cluster

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/meshweaver/supervisor/testkit/etcdtest"
)

func TestMain(m *testing.M) {
	etcdtest.Main() // the etcd member processes of the tests are this binary
	goleak.VerifyTestMain(m,
		// etcd's embedded server and grpc leave process-wide helpers.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/pkg/v3/schedule.(*fifo).run"),
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
	)
}
