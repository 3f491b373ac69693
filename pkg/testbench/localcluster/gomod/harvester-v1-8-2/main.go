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
// With --webhook-listen it also serves Harvester's namespace validator
// (pkg/webhook/resources/namespace), unchanged, over TLS at Harvester's path /v1/webhook/validation,
// wired as Harvester's webhook server wires it (pkg/webhook/server: a wrangler webhook router, the
// validator behind types.NewValidatorAdapter and types.NewAdmissionHandler), on caches of
// ResourceQuotas and Settings that run whether or not this process leads, as Harvester's webhook
// Deployment does. Registering the ValidatingWebhookConfiguration is the caller's part.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"reflect"
	"syscall"

	"github.com/rancher/lasso/pkg/controller"
	"github.com/rancher/wrangler/v3/pkg/generic"
	"github.com/rancher/wrangler/v3/pkg/leader"
	"github.com/rancher/wrangler/v3/pkg/ratelimit"
	"github.com/rancher/wrangler/v3/pkg/schemes"
	"github.com/rancher/wrangler/v3/pkg/start"
	"github.com/rancher/wrangler/v3/pkg/webhook"
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
	webhookconfig "github.com/harvester/harvester/pkg/webhook/config"
	"github.com/harvester/harvester/pkg/webhook/resources/namespace"
	"github.com/harvester/harvester/pkg/webhook/types"
)

// LeaseName is the Lease Harvester's controllers elect their leader with.
const LeaseName = "harvester-controllers"

// ValidationPath is where Harvester's webhook serves its validators.
const ValidationPath = "/v1/webhook/validation"

// webhookFlags say where to serve the namespace validator ("" listen: not served).
type webhookFlags struct {
	listen, cert, key, controllerUser string
}

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
	hook := webhookFlags{}
	flags.StringVar(&hook.listen, "webhook-listen", "", "serve Harvester's namespace validator on host:port (TLS); \"\": not served")
	flags.StringVar(&hook.cert, "webhook-cert", "", "the validator's serving certificate (PEM)")
	flags.StringVar(&hook.key, "webhook-key", "", "its private key (PEM)")
	flags.StringVar(&hook.controllerUser, "webhook-controller-user", "", "Harvester's webhook --controller-user")
	_ = flags.Parse(os.Args[1:])
	if *debug {
		logrus.SetLevel(logrus.DebugLevel)
	}
	if err := run(*kubeconfig, *leaseNamespace, options, hook); err != nil {
		fmt.Fprintln(os.Stderr, "harvester-controllers:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, leaseNamespace string, options config.Options, hook webhookFlags) error {
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

	if hook.listen != "" {
		if err := serveNamespaceValidator(ctx, scaled.Management, options, hook); err != nil {
			return err
		}
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

// serveNamespaceValidator serves Harvester's namespace validator at ValidationPath on hook.listen,
// as pkg/webhook/server's Validation and addHandler route it, and starts the caches it reads.
func serveNamespaceValidator(ctx context.Context, management *config.Management, options config.Options, hook webhookFlags) error {
	rqs := management.HarvesterCoreFactory.Core().V1().ResourceQuota()
	settings := management.HarvesterFactory.Harvesterhci().V1beta1().Setting()
	validator := namespace.NewValidator(rqs.Cache(), settings.Cache())
	webhookOptions := &webhookconfig.Options{
		Namespace:                   options.Namespace,
		Threadiness:                 options.Threadiness,
		HarvesterControllerUsername: hook.controllerUser,
	}
	router := webhook.NewRouter()
	resource := validator.Resource()
	kind := reflect.Indirect(reflect.ValueOf(resource.ObjectType)).Type().Name()
	router.Kind(kind).Group(resource.APIGroup).Type(resource.ObjectType).Handle(
		types.NewAdmissionHandler(types.NewValidatorAdapter(validator), types.AdmissionTypeValidation, webhookOptions))
	if err := start.All(ctx, 1, management.HarvesterCoreFactory, management.HarvesterFactory); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(ValidationPath, router)
	server := &http.Server{Addr: hook.listen, Handler: mux}
	go func() {
		<-ctx.Done()
		_ = server.Close()
	}()
	go func() {
		logrus.Infof("harvester-controllers: namespace validator on https://%s%s", hook.listen, ValidationPath)
		if err := server.ListenAndServeTLS(hook.cert, hook.key); err != nil && err != http.ErrServerClosed {
			logrus.Fatalf("namespace validator: %v", err)
		}
	}()
	return nil
}
