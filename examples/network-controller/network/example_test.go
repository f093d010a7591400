package network_test

import (
	"fmt"

	"github.com/ctrlkit/ctrlkit/examples/network-controller/network"
)

// ExampleSpec_Validate shows the messages the controller puts in the Ready condition
// (reason InvalidSpec) of a Network whose spec it rejects.
func ExampleSpec_Validate() {
	for _, s := range []network.Spec{
		{CIDR: "192.168.0.0/16", Gateway: "192.168.0.1"},
		{CIDR: "192.168.0.0/33", Gateway: "192.168.0.1"},
		{CIDR: "192.168.0.0/16", Gateway: "10.0.0.1"},
		{CIDR: "192.168.7.0/16", Gateway: "192.168.0.1"},
	} {
		fmt.Println(s.Validate())
	}
	// Output:
	// <nil>
	// network: invalid spec: spec.cidr "192.168.0.0/33" is not a valid CIDR (want an address/prefix-length such as 192.168.0.0/16)
	// network: invalid spec: spec.gateway 10.0.0.1 is outside spec.cidr 192.168.0.0/16
	// network: invalid spec: spec.cidr "192.168.7.0/16" has host bits set (the network is 192.168.0.0/16)
}
