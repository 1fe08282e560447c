// kafka-handoff: the empty index of dynamic settings that the left-out config-index extension would build (see pom.xml).
package io.github.kafkahandoff.registry;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;
import java.util.ArrayList;
import javax.enterprise.inject.Produces;
import javax.inject.Singleton;

public class NoDynamicConfigIndex {
    @Produces
    @Singleton
    public DynamicConfigPropertyList dynamicConfigPropertyList() {
        return new DynamicConfigPropertyList(new ArrayList<>());
    }
}
