package flechtwerk.testregistry;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;
import java.util.List;
import javax.enterprise.inject.Produces;
import javax.inject.Singleton;

/**
 * Stands in for the bean that Apicurio's config-index Quarkus extension
 * generates at build time (its deployment artifact is not on Maven
 * Central): the registry starts with no dynamic configuration properties.
 */
@Singleton
public class DynamicConfigProducer {
    @Produces
    @Singleton
    public DynamicConfigPropertyList dynamicConfigProperties() {
        return new DynamicConfigPropertyList(List.of());
    }
}
