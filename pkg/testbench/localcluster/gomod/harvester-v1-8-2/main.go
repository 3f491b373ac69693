// harvester-controllers runs two of Harvester v1.8.2's own controllers, unchanged, against a
// kubeconfig: the VM-migration controller (pkg/controller/master/migration) and the ResourceQuota
// controller (pkg/controller/master/resourcequota). It builds their context the way Harvester's
// `harvester` binary does (pkg/server.New and generateSteveServer: a rate-limiter-free REST config,
// a lasso SharedControllerFactory on Harvester's scheme, config.SetupScaled) and registers them
// under the leader Lease Harvester uses for its controllers (pkg/controller/master/setup.go:
// wrangler's leader.RunOrDie with namespace "" (kube-system) and name "harvester-controllers").
// Only the informers those two controllers ask for are started (wrangler factories are lazy):
// ResourceQuotas, Namespaces, Pods, Settings (harvesterhci.io), VMs, VMIs and VMIMs (kubevirt.io).
//
// Harvester's namespace validator (pkg/webhook/resources/namespace) is linked so the build proves
// it compiles; serving it as an admission webhook is not done here yet.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rancher/lasso/pkg/controller"
	"github.com/rancher/wrangler/v3/pkg/generic"
	"github.com/rancher/wrangler/v3/pkg/leader"
	"github.com/rancher/wrangler/v3/pkg/ratelimit"
	"github.com/rancher/wrangler/v3/pkg/schemes"
	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	kubevirtv1 "kubevirt.io/api/core/v1"

	harvesterv1 "github.com/harvester/harvester/pkg/apis/harvesterhci.io/v1beta1"
	"github.com/harvester/harvester/pkg/config"
	"github.com/harvester/harvester/pkg/controller/master/migration"
	"github.com/harvester/harvester/pkg/controller/master/resourcequota"
	"github.com/harvester/harvester/pkg/webhook/resources/namespace"
)

// LeaseName is the Lease Harvester's controllers elect their leader with.
const LeaseName = "harvester-controllers"

// The namespace validator's constructor: referenced so that it is compiled and linked.
var _ = namespace.NewValidator

// registerFuncs are the two entries of Harvester's registerFuncs (pkg/controller/master/setup.go)
// that touch ResourceQuotas, in Harvester's order.
var registerFuncs = []func(context.Context, *config.Management, config.Options) error{
	migration.Register,
	resourcequota.Register,
}

// newScheme is pkg/server's Scheme: Harvester's and KubeVirt's types plus wrangler's schemes.
func newScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(harvesterv1.AddToScheme(scheme))
	utilruntime.Must(kubevirtv1.AddToScheme(scheme))
	utilruntime.Must(schemes.AddToScheme(scheme))
	return scheme
}

func main() {
	// A flag set of our own: a dependency (controller-runtime) registers --kubeconfig globally.
	flags := flag.NewFlagSet("harvester-controllers", flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file")
	options := config.Options{}
	flags.StringVar(&options.Namespace, "namespace", "harvester-system", "Harvester's namespace (its --namespace)")
	flags.IntVar(&options.Threadiness, "threadiness", 10, "controller threads (Harvester's default)")
	leaseNamespace := flags.String("lease-namespace", "", "namespace of the leader Lease (\"\": kube-system, as Harvester)")
	debug := flags.Bool("debug", false, "debug logging")
	_ = flags.Parse(os.Args[1:])
	if *debug {
		logrus.SetLevel(logrus.DebugLevel)
	}
	if err := run(*kubeconfig, *leaseNamespace, options); err != nil {
		fmt.Fprintln(os.Stderr, "harvester-controllers:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, leaseNamespace string, options config.Options) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}
	restConfig, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig %q: %w", kubeconfig, err)
	}
	restConfig.RateLimiter = ratelimit.None

	factory, err := controller.NewSharedControllerFactoryFromConfig(restConfig, newScheme())
	if err != nil {
		return err
	}
	ctx, scaled, err := config.SetupScaled(ctx, restConfig, &generic.FactoryOptions{SharedControllerFactory: factory})
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}

	logrus.Infof("harvester-controllers: waiting for leader Lease %s", LeaseName)
	go leader.RunOrDie(ctx, leaseNamespace, LeaseName, client, func(ctx context.Context) {
		logrus.Infof("harvester-controllers: leading; registering migration and resourcequota")
		for _, register := range registerFuncs {
			if err := register(ctx, scaled.Management, options); err != nil {
				panic(err)
			}
		}
		if err := scaled.Management.Start(options.Threadiness); err != nil {
			panic(err)
		}
		logrus.Infof("harvester-controllers: controllers started")
		<-ctx.Done()
	})
	<-ctx.Done()
	return nil
}
